/*
 * props.c — llama-server's GET /props, POST /props and the `params` object of GET /slots.
 *
 * What it is: server-api.md §12 (and §2.3 --props / --slots, §2.8 for the echoed
 * speculative.n_max / n_min / p_min): JSON bodies built from a srv_props_info that http.c
 * fills from its loaded state, and the per-slot `params` that engine.c's
 * srv_engine_slots_json puts in each slot. What it is not: routing, auth or sending (http.c),
 * nor the slot snapshot itself (engine.c owns slot state and its lock).
 *
 * Shapes follow llama-server: default_generation_settings = {params, n_ctx}; `params` uses
 * llama-server's key names, with "speculative.*" keys spelled with a dot. Choices: the seed
 * is reported as given (4294967295 = random, llama.cpp's LLAMA_DEFAULT_SEED); spex has no
 * property that can change at run time, so POST /props (with --props) only checks that its
 * body is a JSON object and answers {"success": true}, as llama-server does.
 */
#include "gguf/api.h"
#include "server/server.h"
#include "sample/api.h"
#include "spec/api.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *stage_name(spex_sampler_stage s) {
    switch (s) {
    case SPEX_SAMPLER_PENALTIES: return "penalties";
    case SPEX_SAMPLER_TOP_K: return "top_k";
    case SPEX_SAMPLER_TOP_P: return "top_p";
    case SPEX_SAMPLER_MIN_P: return "min_p";
    case SPEX_SAMPLER_TEMPERATURE: return "temperature";
    }
    return "unknown";
}

/* A float as the double of its shortest decimal form, so 0.8f prints as 0.8, not as
 * 0.800000011920929. */
static double fnum(float f) {
    char b[32];
    snprintf(b, sizeof b, "%.7g", (double)f);
    return strtod(b, NULL);
}

cJSON *srv_params_json(const srv_gen_defaults *d, const srv_task *t) {
    /* A task's sampler params and request fields are written before srv_engine_submit and
     * never after, so reading them while the task is alive needs no lock of its own. */
    const spex_sampler_params *sp = t ? spex_sampler_get_params(t->smp) : &d->sp;
    long n_predict = t ? t->n_predict : d->n_predict;
    int32_t n_max = d->n_max;
    if (t && t->spec_n_max >= 0 && t->spec_n_max < n_max) n_max = t->spec_n_max;
    cJSON *p = cJSON_CreateObject();
    if (!p) return NULL;
    cJSON_AddNumberToObject(p, "n_predict", (double)n_predict);
    cJSON_AddNumberToObject(p, "max_tokens", (double)n_predict);
    cJSON_AddNumberToObject(p, "seed", (double)sp->seed);
    cJSON_AddNumberToObject(p, "temperature", fnum(sp->temp));
    cJSON_AddNumberToObject(p, "top_k", sp->top_k);
    cJSON_AddNumberToObject(p, "top_p", fnum(sp->top_p));
    cJSON_AddNumberToObject(p, "min_p", fnum(sp->min_p));
    cJSON_AddNumberToObject(p, "repeat_last_n", sp->repeat_last_n);
    cJSON_AddNumberToObject(p, "repeat_penalty", fnum(sp->repeat_penalty));
    cJSON_AddNumberToObject(p, "presence_penalty", fnum(sp->presence_penalty));
    cJSON_AddNumberToObject(p, "frequency_penalty", fnum(sp->frequency_penalty));
    cJSON *stop = cJSON_AddArrayToObject(p, "stop");
    for (int i = 0; t && i < t->n_stop; i++) cJSON_AddItemToArray(stop, cJSON_CreateString(t->stop[i]));
    cJSON *smp = cJSON_AddArrayToObject(p, "samplers");
    for (int i = 0; i < sp->n_stages && i < SPEX_SAMPLER_MAX_STAGES; i++)
        cJSON_AddItemToArray(smp, cJSON_CreateString(stage_name(sp->stages[i])));
    cJSON_AddNumberToObject(p, "speculative.n_max", n_max);
    int32_t n_min = t && t->spec_n_min >= 0 ? t->spec_n_min : d->n_min;
    cJSON_AddNumberToObject(p, "speculative.n_min", n_min < n_max ? n_min : n_max);
    cJSON_AddNumberToObject(p, "speculative.p_min", fnum(t && t->spec_p_min >= 0 ? t->spec_p_min : d->p_min));
    cJSON_AddStringToObject(p, "speculative.type", d->spec_type);
    return p;
}

char *srv_props_json(const srv_props_info *pi) {
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    cJSON *dgs = cJSON_AddObjectToObject(o, "default_generation_settings");
    cJSON_AddItemToObject(dgs, "params", srv_params_json(&pi->d, NULL));
    cJSON_AddNumberToObject(dgs, "n_ctx", pi->n_ctx_slot);
    /* spex: the drafter behind speculative.type ("dflash2", "dflash"; null without one) */
    if (pi->spec_variant) cJSON_AddStringToObject(dgs, "speculative.variant", pi->spec_variant);
    else cJSON_AddNullToObject(dgs, "speculative.variant");
    cJSON_AddNumberToObject(o, "total_slots", pi->n_slots);
    cJSON_AddStringToObject(o, "model_alias", pi->model_alias);
    cJSON_AddStringToObject(o, "model_path", pi->model_path);
    /* llama-server reports the template text it renders: --chat-template-file's text, else the
     * GGUF's (which --jinja renders, and the built-in renderers equal) when it has one, else
     * the built-in's name (always named in chat_template_builtin). */
    const char *tname = spex_chat_template_name(pi->tmpl);
    spex_str js = {0};
    if (pi->jinja_text) {
        cJSON_AddStringToObject(o, "chat_template", pi->jinja_text);
    } else if (!pi->tmpl_from_flag && pi->gguf &&
        spex_gguf_get_str(pi->gguf, "tokenizer.chat_template", &js, NULL) == SPEX_OK && js.ptr) {
        char *text = malloc(js.len + 1);
        if (text) memcpy(text, js.ptr, js.len), text[js.len] = 0;
        cJSON_AddStringToObject(o, "chat_template", text ? text : tname);
        free(text);
    } else {
        cJSON_AddStringToObject(o, "chat_template", tname);
    }
    cJSON_AddStringToObject(o, "chat_template_builtin", tname);
    cJSON *mod = cJSON_AddObjectToObject(o, "modalities");
    cJSON_AddBoolToObject(mod, "vision", false);
    cJSON_AddBoolToObject(mod, "audio", false);
    cJSON_AddBoolToObject(o, "endpoint_slots", pi->endpoint_slots);
    cJSON_AddBoolToObject(o, "endpoint_props", pi->endpoint_props);
    cJSON_AddBoolToObject(o, "endpoint_metrics", pi->endpoint_metrics);
    cJSON_AddStringToObject(o, "build_info", pi->build_info);
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

int srv_props_update(const char *body, size_t len, char *msg, size_t msg_cap) {
    cJSON *o = cJSON_ParseWithLength(body ? body : "", len);
    bool parsed = o != NULL, ok = cJSON_IsObject(o);
    cJSON_Delete(o);
    if (ok) return 0;
    snprintf(msg, msg_cap, "%s", parsed ? "the body must be a JSON object" : "the body is not valid JSON");
    return 400;
}
