/*
 * file.c — read-only file mappings and temp-file-then-rename output (see file.h).
 *
 * Mappings are MAP_PRIVATE + PROT_READ: weights stay in the page cache, shared between
 * processes, and a stray write through a const-cast pointer faults instead of corrupting
 * the model. Output goes to a temporary file in the destination's directory (rename is
 * atomic only within one file system) and is fsync'ed before the rename, so a crash leaves
 * either the old file or the complete new one, never a truncated GGUF under the final name.
 */
#include "core/file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* Opens path and checks it is a regular file that fits the address space. */
static spex_status open_regular(const char *path, int *fd_out, size_t *size_out, spex_error *err) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return spex_error_set(err, SPEX_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return spex_error_set(err, SPEX_ERR_IO, "%s: cannot stat: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return spex_error_set(err, SPEX_ERR_IO, "%s: not a regular file", path);
    }
    if ((uint64_t)st.st_size > (uint64_t)SIZE_MAX) {
        close(fd);
        return spex_error_set(err, SPEX_ERR_IO, "%s: file of %lld bytes does not fit the address space",
                              path, (long long)st.st_size);
    }
    *fd_out = fd;
    *size_out = (size_t)st.st_size;
    return SPEX_OK;
}

spex_status spex_file_map(const char *path, spex_mapped_file *out, spex_error *err) {
    memset(out, 0, sizeof *out);
    int fd = -1;
    size_t size = 0;
    spex_status s = open_regular(path, &fd, &size, err);
    if (s != SPEX_OK) return s;
    if (size == 0) {
        close(fd);
        return SPEX_OK;
    }
    void *p = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd); /* the mapping keeps its own reference to the file */
    if (p == MAP_FAILED) return spex_error_set(err, SPEX_ERR_IO, "%s: cannot mmap %zu bytes: %s", path, size, strerror(e));
    out->data = p;
    out->size = size;
    return SPEX_OK;
}

spex_status spex_file_read(const char *path, spex_mapped_file *out, spex_error *err) {
    memset(out, 0, sizeof *out);
    int fd = -1;
    size_t size = 0;
    spex_status s = open_regular(path, &fd, &size, err);
    if (s != SPEX_OK) return s;
    if (size == 0) {
        close(fd);
        return SPEX_OK;
    }
    /* anonymous pages: page-aligned like a mapping, so every tensor keeps its alignment */
    uint8_t *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        int e = errno;
        close(fd);
        return spex_error_set(err, SPEX_ERR_NOMEM, "%s: cannot allocate %zu bytes to read it: %s", path, size,
                              strerror(e));
    }
    size_t got = 0;
    while (got < size) {
        size_t want = size - got < ((size_t)1 << 30) ? size - got : (size_t)1 << 30;
        ssize_t r = pread(fd, p + got, want, (off_t)got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            int e = r < 0 ? errno : 0;
            close(fd);
            munmap(p, size);
            return e ? spex_error_set(err, SPEX_ERR_IO, "%s: read failed at byte %zu: %s", path, got, strerror(e))
                     : spex_error_set(err, SPEX_ERR_IO, "%s: file ended at byte %zu of %zu while reading it", path,
                                      got, size);
        }
        got += (size_t)r;
    }
    close(fd);
    (void)mprotect(p, size, PROT_READ);   /* as a mapping: a stray write faults */
    out->data = p;
    out->size = size;
    out->read = true;
    return SPEX_OK;
}

void spex_file_release(const spex_mapped_file *m, const void *p, size_t n) {
    const uintptr_t lo = (uintptr_t)p, hi = lo + n, base = (uintptr_t)m->data;
    if (!m->data || m->read || lo < base || hi > base + m->size) return;
    const uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
    const uintptr_t a = (lo + pg - 1) / pg * pg, b = hi / pg * pg;
    if (b > a) (void)madvise((void *)a, b - a, MADV_DONTNEED); /* advice only: failure changes nothing */
}

void spex_file_unmap(spex_mapped_file *m) {
    if (m->data && m->size) munmap((void *)m->data, m->size);
    memset(m, 0, sizeof *m);
}

spex_status spex_file_get_id(const char *path, spex_file_id *out, spex_error *err) {
    struct stat st;
    if (stat(path, &st) != 0) {
        if (errno == ENOENT) return spex_error_set(err, SPEX_ERR_NOT_FOUND, "%s: does not exist", path);
        return spex_error_set(err, SPEX_ERR_IO, "%s: cannot stat: %s", path, strerror(errno));
    }
    out->dev = (uint64_t)st.st_dev;
    out->ino = (uint64_t)st.st_ino;
    return SPEX_OK;
}

static char *str_dup(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

spex_status spex_out_file_open(const char *path, spex_out_file *out, spex_error *err) {
    memset(out, 0, sizeof *out);
    static const char suffix[] = ".tmp.XXXXXX";
    size_t n = strlen(path);
    out->path = str_dup(path);
    out->tmp_path = malloc(n + sizeof suffix);
    if (!out->path || !out->tmp_path) {
        free(out->path);
        free(out->tmp_path);
        memset(out, 0, sizeof *out);
        return spex_error_set(err, SPEX_ERR_NOMEM, "%s: out of memory", path);
    }
    memcpy(out->tmp_path, path, n);
    memcpy(out->tmp_path + n, suffix, sizeof suffix);
    int fd = mkstemp(out->tmp_path);
    if (fd < 0) {
        int e = errno;
        free(out->path);
        free(out->tmp_path);
        memset(out, 0, sizeof *out);
        return spex_error_set(err, SPEX_ERR_IO, "%s: cannot create a temporary file beside it: %s", path, strerror(e));
    }
    /* mkstemp creates 0600; give the result the usual permissions (umask applies). */
    mode_t mask = umask(0);
    umask(mask);
    (void)fchmod(fd, 0666 & ~mask);
    out->fp = fdopen(fd, "wb");
    if (!out->fp) {
        int e = errno;
        close(fd);
        unlink(out->tmp_path);
        free(out->path);
        free(out->tmp_path);
        memset(out, 0, sizeof *out);
        return spex_error_set(err, SPEX_ERR_IO, "%s: cannot open a stream: %s", path, strerror(e));
    }
    setvbuf(out->fp, NULL, _IOFBF, 1 << 20);
    return SPEX_OK;
}

spex_status spex_out_file_write(spex_out_file *f, const void *buf, size_t n, spex_error *err) {
    if (n && fwrite(buf, 1, n, f->fp) != n)
        return spex_error_set(err, SPEX_ERR_IO, "%s: write failed: %s", f->path, strerror(errno));
    return SPEX_OK;
}

spex_status spex_out_file_zeros(spex_out_file *f, size_t n, spex_error *err) {
    static const uint8_t zeros[256];
    while (n > 0) {
        size_t k = n < sizeof zeros ? n : sizeof zeros;
        spex_status s = spex_out_file_write(f, zeros, k, err);
        if (s != SPEX_OK) return s;
        n -= k;
    }
    return SPEX_OK;
}

static void out_file_release(spex_out_file *f) {
    free(f->path);
    free(f->tmp_path);
    memset(f, 0, sizeof *f);
}

spex_status spex_out_file_commit(spex_out_file *f, spex_error *err) {
    spex_status s = SPEX_OK;
    if (fflush(f->fp) != 0 || fsync(fileno(f->fp)) != 0)
        s = spex_error_set(err, SPEX_ERR_IO, "%s: write failed: %s", f->path, strerror(errno));
    if (fclose(f->fp) != 0 && s == SPEX_OK)
        s = spex_error_set(err, SPEX_ERR_IO, "%s: close failed: %s", f->path, strerror(errno));
    f->fp = NULL;
    if (s == SPEX_OK && rename(f->tmp_path, f->path) != 0)
        s = spex_error_set(err, SPEX_ERR_IO, "%s: cannot rename %s into place: %s", f->path, f->tmp_path,
                           strerror(errno));
    if (s != SPEX_OK) unlink(f->tmp_path);
    out_file_release(f);
    return s;
}

void spex_out_file_abort(spex_out_file *f) {
    if (f->fp) fclose(f->fp);
    if (f->tmp_path) unlink(f->tmp_path);
    out_file_release(f);
}
