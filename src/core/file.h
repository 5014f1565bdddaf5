/*
 * file.h — whole-file access for the library: a read-only mapping of a file with its size,
 * and an output file written under a temporary name and renamed into place.
 *
 * What it is: the only place that calls open/mmap/rename, so readers (GGUF) see a plain
 * (pointer, size) pair and writers never leave a half-written file under the final name.
 * What it is not: buffered random-access I/O or a portable abstraction beyond POSIX.
 * Errors are reported through spex_error as "<path>: <what failed>: <strerror>".
 */
#ifndef SPEX_CORE_FILE_H
#define SPEX_CORE_FILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "spex.h"

/* A read-only view of a whole regular file. size 0 gives data == NULL. */
typedef struct spex_mapped_file {
    const uint8_t *data;
    size_t size;
    bool read;   /* the bytes were read into anonymous memory (spex_file_read), not mapped */
} spex_mapped_file;

spex_status spex_file_map(const char *path, spex_mapped_file *out, spex_error *err);
/* The same view, but the whole file is read into private memory first (llama.cpp's
 * --no-mmap): every byte is resident before the call returns, and the file can change or
 * vanish afterwards without affecting the model. */
spex_status spex_file_read(const char *path, spex_mapped_file *out, spex_error *err);
/* Safe on a zeroed or already unmapped struct. */
void spex_file_unmap(spex_mapped_file *m);
/* Gives the whole pages inside [p, p + n) (a range of m) back to the kernel: a later read
 * maps the file's bytes again. For data that was copied elsewhere (repacked weights), so
 * the copy does not count twice in the process's resident memory. A no-op on read memory,
 * which has no file behind it to page the bytes in again. */
void spex_file_release(const spex_mapped_file *m, const void *p, size_t n);

/* Identity of an existing file (device and inode), used to refuse overwriting an input
 * through another path (a symlink, a hard link, "./x" vs "x"). */
typedef struct spex_file_id {
    uint64_t dev, ino;
} spex_file_id;

/* SPEX_ERR_NOT_FOUND if the path does not exist, SPEX_ERR_IO for other failures. */
spex_status spex_file_get_id(const char *path, spex_file_id *out, spex_error *err);

/* An output file: bytes go to "<path>.tmp.XXXXXX" in the same directory; commit flushes,
 * syncs and renames it to path; abort removes it. Exactly one of commit/abort must follow
 * a successful open (commit also cleans up when it fails). */
typedef struct spex_out_file {
    FILE *fp;
    char *path;
    char *tmp_path;
} spex_out_file;

spex_status spex_out_file_open(const char *path, spex_out_file *out, spex_error *err);
spex_status spex_out_file_write(spex_out_file *f, const void *buf, size_t n, spex_error *err);
/* Writes n zero bytes (alignment padding). */
spex_status spex_out_file_zeros(spex_out_file *f, size_t n, spex_error *err);
spex_status spex_out_file_commit(spex_out_file *f, spex_error *err);
void spex_out_file_abort(spex_out_file *f);

#endif
