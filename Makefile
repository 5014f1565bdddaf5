# Makefile — builds spex: the library objects, the CLI (build/spex), the tests and fuzzers.
#
#   make            release: -O3, one binary for any x86-64 (AVX2/AVX-512 picked at start-up)
#   make debug      -O0 -g into build-debug/
#   make asan       ASan+UBSan into build-asan/
#   make test       release build + every test, last line "N passed, N failed"
#   make test-asan  the same suite under ASan+UBSan
#   make fuzz       libFuzzer targets (clang) into build-fuzz/
#   make demo       the README's main job (see README.md)
#
# Sources are found by wildcard: a new .c file under src/ is part of the library, one under
# tools/ is part of the CLI, tests/test_*.c is a test program, fuzz/fuzz_*.c a fuzz target,
# examples/*.c an example program (built with the tests; `make examples` alone).
# Files under src/cpu/arch/<isa>/ are compiled with that ISA's flags only.

BUILD ?= release
CC ?= cc
ARCH := $(shell $(CC) -dumpmachine | cut -d- -f1)
JOBS ?= $(shell nproc 2>/dev/null || echo 2)

ifeq ($(BUILD),release)
  OUT ?= build
  OPT := -O3 -g
else ifeq ($(BUILD),debug)
  OUT ?= build-debug
  OPT := -O0 -g3
else ifeq ($(BUILD),asan)
  OUT ?= build-asan
  OPT := -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined
  LDSAN := -fsanitize=address,undefined
else
  $(error BUILD must be release, debug or asan)
endif

WARN := -Wall -Wextra -Wshadow -Wno-unused-parameter -Wstrict-prototypes -Wmissing-prototypes
CFLAGS_BASE := -std=c11 -D_GNU_SOURCE $(OPT) $(WARN) -Iinclude -Isrc -pthread -MMD -MP $(EXTRA_CFLAGS)
LDLIBS := -lpcre2-8 -lcjson -lmicrohttpd -lm -pthread $(LDSAN)

AVX2_FLAGS := -mavx2 -mfma -mf16c
AVX512_FLAGS := $(AVX2_FLAGS) -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni -mavx512bf16

ALL_SRC := $(shell find src -name '*.c' | sort)
ifeq ($(filter x86_64 i686 i386,$(ARCH)),)
  LIB_SRC := $(filter-out src/cpu/arch/x86/%,$(ALL_SRC))
else
  LIB_SRC := $(filter-out src/cpu/arch/arm/%,$(ALL_SRC))
endif
ifneq ($(ARCH),aarch64)
  LIB_SRC := $(filter-out src/cpu/arch/arm/%,$(LIB_SRC))
endif
TOOL_SRC := $(sort $(wildcard tools/*.c))
TEST_SRC := $(sort $(wildcard tests/test_*.c))
TEST_COMMON := $(filter-out $(TEST_SRC),$(wildcard tests/*.c))
FUZZ_SRC := $(sort $(wildcard fuzz/fuzz_*.c))
# Test harnesses: programs the tests start, the CLI's subcommands with a main of their own.
HARNESS_SRC := $(sort $(wildcard tests/harness/*.c))

LIB_OBJ := $(LIB_SRC:%.c=$(OUT)/obj/%.o)
TOOL_OBJ := $(TOOL_SRC:%.c=$(OUT)/obj/%.o)
TEST_COMMON_OBJ := $(TEST_COMMON:%.c=$(OUT)/obj/%.o)
TEST_BIN := $(TEST_SRC:tests/%.c=$(OUT)/tests/%)
HARNESS_BIN := $(HARNESS_SRC:tests/harness/%.c=$(OUT)/tests/harness/%)
LIB := $(OUT)/libspex.a

.PHONY: all release debug asan test test-asan fuzz fuzz-run demo clean tests objs examples
all: $(OUT)/spex

# Every object without linking (the aarch64 cross check: no arm64 PCRE2/cJSON to link against).
objs: $(LIB) $(TOOL_OBJ) $(TEST_BIN:$(OUT)/tests/%=$(OUT)/obj/tests/%.o) $(TEST_COMMON_OBJ) \
      $(HARNESS_SRC:%.c=$(OUT)/obj/%.o)

release:
	$(MAKE) BUILD=release
debug:
	$(MAKE) BUILD=debug
asan:
	$(MAKE) BUILD=asan

$(OUT)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) $(CFLAGS_ISA) -c $< -o $@

$(OUT)/obj/src/cpu/arch/x86/avx2/%.o: CFLAGS_ISA := $(AVX2_FLAGS)
# AVX-VNNI only in the files named for it (the table checks CPUID before using them)
$(OUT)/obj/src/cpu/arch/x86/avx2/%_avxvnni.o: CFLAGS_ISA := $(AVX2_FLAGS) -mavxvnni
$(OUT)/obj/src/cpu/arch/x86/avx512/%.o: CFLAGS_ISA := $(AVX512_FLAGS)
ifneq ($(filter x86_64 i686 i386,$(ARCH)),)
# the AMX kernels again on a C model of the tile instructions (tests only, see the file)
$(OUT)/obj/tests/amx_emul.o: CFLAGS_ISA := $(AVX512_FLAGS)
endif

$(LIB): $(LIB_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@
	ar rcs $@ $^

$(OUT)/spex: $(TOOL_OBJ) $(LIB)
	$(CC) $(OPT) -o $@ $(TOOL_OBJ) $(LIB) $(LDLIBS)

$(OUT)/tests/%: $(OUT)/obj/tests/%.o $(TEST_COMMON_OBJ) $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(OPT) -o $@ $< $(TEST_COMMON_OBJ) $(LIB) $(LDLIBS)

$(OUT)/obj/tests/harness/%.o: CFLAGS_BASE += -Itools
$(OUT)/tests/harness/%: $(OUT)/obj/tests/harness/%.o $(filter-out $(OUT)/obj/tools/spex.o,$(TOOL_OBJ)) $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(OPT) -o $@ $^ $(LDLIBS)

# test_opts: the option table of tools/opts.c, linked with the tools' objects (as a harness is)
$(OUT)/obj/tests/test_opts.o: CFLAGS_BASE += -Itools
$(OUT)/tests/test_opts: $(OUT)/obj/tests/test_opts.o $(TEST_COMMON_OBJ) $(filter-out $(OUT)/obj/tools/spex.o,$(TOOL_OBJ)) $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(OPT) -o $@ $^ $(LDLIBS)

tests: $(TEST_BIN) $(OUT)/spex $(HARNESS_BIN) examples

# examples/*.c: programs an embedder would write, compiled against include/ alone (no -Isrc,
# no _GNU_SOURCE) so that they can use nothing but the public header; linked with the library.
EXAMPLE_SRC := $(sort $(wildcard examples/*.c))
EXAMPLE_BIN := $(EXAMPLE_SRC:examples/%.c=$(OUT)/examples/%)
examples: $(EXAMPLE_BIN)
$(EXAMPLE_SRC:%.c=$(OUT)/obj/%.o): $(OUT)/obj/examples/%.o: examples/%.c
	@mkdir -p $(dir $@)
	$(CC) -std=c11 $(OPT) $(WARN) -Iinclude -MMD -MP $(EXTRA_CFLAGS) -c $< -o $@
$(EXAMPLE_BIN): $(OUT)/examples/%: $(OUT)/obj/examples/%.o $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(OPT) -o $@ $< $(LIB) $(LDLIBS)

# The server's build_info / system_fingerprint, llama-server's form b<commits>-<commit>, from git
# when the tree is a checkout (b0-unknown otherwise); the header is rewritten only when it
# changes, so a new commit rebuilds http.o and nothing else.
%/build-info.h: FORCE
	@mkdir -p $(dir $@)
	@n=$$(git rev-list --count HEAD 2>/dev/null || echo 0); c=$$(git rev-parse --short=7 HEAD 2>/dev/null || echo unknown); \
	  printf '#define SPEX_BUILD_INFO "b%s-%s"\n' "$$n" "$$c" > $@.tmp; \
	  if cmp -s $@.tmp $@; then rm -f $@.tmp; else mv $@.tmp $@; fi
$(OUT)/obj/src/server/http.o: $(OUT)/build-info.h
$(OUT)/obj/src/server/http.o: CFLAGS_ISA := -I$(OUT)
.PHONY: FORCE
FORCE:

# The web page of `spex serve` (src/server/webui/), embedded in webui.o as byte arrays.
WEBUI_FILES := src/server/webui/index.html src/server/webui/webui.js src/server/webui/webui.css
%/webui-assets.h: $(WEBUI_FILES) scripts/embed.sh
	@mkdir -p $(dir $@)
	scripts/embed.sh $@ webui_index_html=src/server/webui/index.html webui_js=src/server/webui/webui.js \
	  webui_css=src/server/webui/webui.css
$(OUT)/obj/src/server/webui.o: $(OUT)/webui-assets.h
$(OUT)/obj/src/server/webui.o: CFLAGS_ISA := -I$(OUT)

test:
	$(MAKE) -j$(JOBS) BUILD=$(BUILD) tests
	tests/run.sh $(OUT)

test-asan:
	$(MAKE) BUILD=asan test

# libFuzzer targets: clang only, with ASan+UBSan; the library is rebuilt with coverage.
FUZZ_OUT := build-fuzz
FUZZ_FLAGS := -std=c11 -D_GNU_SOURCE -O1 -g -Iinclude -Isrc -pthread -fsanitize=fuzzer,address,undefined
# Parsers depend only on core, gguf, tensor and tok (one-way dependencies), so fuzzers link just those.
FUZZ_LIB_SRC := $(filter src/core/% src/gguf/% src/tensor/% src/tok/%,$(LIB_SRC))
fuzz: $(FUZZ_SRC:fuzz/%.c=$(FUZZ_OUT)/%)
$(FUZZ_OUT)/%: fuzz/%.c $(FUZZ_LIB_SRC)
	@mkdir -p $(FUZZ_OUT)
	clang $(FUZZ_FLAGS) -o $@ $< $(FUZZ_LIB_SRC) -lpcre2-8 -lcjson -lm

# fuzz_server_req parses request bodies: the server's api.c, embd.c, infill.c, responses.c and
# anthropic.c (with toolcall.c's byte buffer) and what they depend on (cJSON, src/tok).
FUZZ_REQ_SRC := src/server/api.c src/server/embd.c src/server/infill.c src/server/responses.c src/server/anthropic.c \
                src/server/toolcall.c
$(FUZZ_OUT)/fuzz_server_req: fuzz/fuzz_server_req.c $(FUZZ_REQ_SRC) $(FUZZ_LIB_SRC)
	@mkdir -p $(FUZZ_OUT)
	clang $(FUZZ_FLAGS) -o $@ $< $(FUZZ_REQ_SRC) $(FUZZ_LIB_SRC) -lpcre2-8 -lcjson -lm

# fuzz_slot_file: the saved-slot file validator (src/server/slot_file.c; api.c for its UTF-8 check).
$(FUZZ_OUT)/fuzz_slot_file: fuzz/fuzz_slot_file.c src/server/slot_file.c src/server/api.c src/server/infill.c $(FUZZ_LIB_SRC)
	@mkdir -p $(FUZZ_OUT)
	clang $(FUZZ_FLAGS) -o $@ $< src/server/slot_file.c src/server/api.c src/server/infill.c $(FUZZ_LIB_SRC) -lpcre2-8 -lcjson -lm

# fuzz_toolcall: the streaming <tool_call> splitter (src/server/toolcall.c) and cJSON.
$(FUZZ_OUT)/fuzz_toolcall: fuzz/fuzz_toolcall.c src/server/toolcall.c $(FUZZ_LIB_SRC)
	@mkdir -p $(FUZZ_OUT)
	clang $(FUZZ_FLAGS) -o $@ $< src/server/toolcall.c $(FUZZ_LIB_SRC) -lpcre2-8 -lcjson -lm

# fuzz_grammar: the GBNF engine (src/sample/grammar*.c), which depends on core alone.
$(FUZZ_OUT)/fuzz_grammar: fuzz/fuzz_grammar.c $(wildcard src/sample/grammar*.c) $(filter src/core/%,$(LIB_SRC))
	@mkdir -p $(FUZZ_OUT)
	clang $(FUZZ_FLAGS) -o $@ $< $(wildcard src/sample/grammar*.c) $(filter src/core/%,$(LIB_SRC)) -lm

# fuzz_http_head: the front door's request-head check (src/server/head.c), and the path and
# Origin rules of webui.c and cors.c (libmicrohttpd only for the response helpers they hold).
$(FUZZ_OUT)/fuzz_http_head: fuzz/fuzz_http_head.c src/server/head.c src/server/webui.c src/server/cors.c \
                            $(FUZZ_OUT)/webui-assets.h
	@mkdir -p $(FUZZ_OUT)
	clang $(FUZZ_FLAGS) -I$(FUZZ_OUT) -o $@ $< src/server/head.c src/server/webui.c src/server/cors.c -lmicrohttpd

# fuzz_compare_ar: the --compare-ar file reader of spex demo (tools/compare.c) and cJSON.
$(FUZZ_OUT)/fuzz_compare_ar: fuzz/fuzz_compare_ar.c tools/compare.c
	@mkdir -p $(FUZZ_OUT)
	clang $(FUZZ_FLAGS) -Itools -o $@ $< tools/compare.c -lcjson -lm

# fuzz_dflash loads drafters against a real target, so it needs the whole library: built
# once with coverage (objects with their ISA flags, like the release build) into a static lib.
FUZZ_OBJ_FLAGS := -std=c11 -D_GNU_SOURCE -O1 -g -Iinclude -Isrc -pthread -fsanitize=fuzzer-no-link,address,undefined -MMD -MP
FUZZ_FULL_OBJ := $(LIB_SRC:%.c=$(FUZZ_OUT)/obj/%.o)
$(FUZZ_OUT)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	clang $(FUZZ_OBJ_FLAGS) $(CFLAGS_ISA) -c $< -o $@
$(FUZZ_OUT)/obj/src/cpu/arch/x86/avx2/%.o: CFLAGS_ISA := $(AVX2_FLAGS)
$(FUZZ_OUT)/obj/src/cpu/arch/x86/avx2/%_avxvnni.o: CFLAGS_ISA := $(AVX2_FLAGS) -mavxvnni
$(FUZZ_OUT)/obj/src/cpu/arch/x86/avx512/%.o: CFLAGS_ISA := $(AVX512_FLAGS)
$(FUZZ_OUT)/obj/src/server/http.o: $(FUZZ_OUT)/build-info.h
$(FUZZ_OUT)/obj/src/server/http.o: CFLAGS_ISA := -I$(FUZZ_OUT)
$(FUZZ_OUT)/obj/src/server/webui.o: $(FUZZ_OUT)/webui-assets.h
$(FUZZ_OUT)/obj/src/server/webui.o: CFLAGS_ISA := -I$(FUZZ_OUT)
$(FUZZ_OUT)/libspex.a: $(FUZZ_FULL_OBJ)
	rm -f $@
	ar rcs $@ $^
$(FUZZ_OUT)/fuzz_dflash: fuzz/fuzz_dflash.c $(FUZZ_OUT)/libspex.a
	@mkdir -p $(FUZZ_OUT)
	clang $(FUZZ_FLAGS) -o $@ $< $(FUZZ_OUT)/libspex.a -lpcre2-8 -lcjson -lm
# fuzz_model loads targets and runs their forward: the whole library as well.
$(FUZZ_OUT)/fuzz_model: fuzz/fuzz_model.c $(FUZZ_OUT)/libspex.a
	@mkdir -p $(FUZZ_OUT)
	clang $(FUZZ_FLAGS) -o $@ $< $(FUZZ_OUT)/libspex.a -lpcre2-8 -lcjson -lmicrohttpd -lm

# Runs each fuzz target for FUZZ_SECONDS on its seed corpus (fuzz/corpus/<name>/).
FUZZ_SECONDS ?= 30
fuzz-run: fuzz
	@for f in $(FUZZ_SRC:fuzz/%.c=%); do \
	  name=$${f#fuzz_}; mkdir -p $(FUZZ_OUT)/corpus-$$name; \
	  echo "fuzz: $$f for $(FUZZ_SECONDS)s"; \
	  if ./$(FUZZ_OUT)/$$f -max_total_time=$(FUZZ_SECONDS) -max_len=65536 -rss_limit_mb=2048 -timeout=10 \
	      -print_final_stats=1 $(FUZZ_OUT)/corpus-$$name fuzz/corpus/$$name >$(FUZZ_OUT)/$$f.log 2>&1; then \
	    tail -n 4 $(FUZZ_OUT)/$$f.log; \
	  else \
	    tail -n 60 $(FUZZ_OUT)/$$f.log; echo "fuzz: $$f FAILED"; exit 1; \
	  fi; \
	done

# the build in parallel, as `make test` does: the main job's 3 minutes include it
demo:
	$(MAKE) -j$(JOBS) BUILD=$(BUILD) all
	scripts/demo.sh $(OUT)

clean:
	rm -rf build build-debug build-asan build-fuzz build-clang build-werror-gcc build-werror-clang build-arm64

-include $(shell find $(OUT) -name '*.d' 2>/dev/null)
-include $(shell find $(FUZZ_OUT)/obj -name '*.d' 2>/dev/null)
