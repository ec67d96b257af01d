/*
 * Maps FILE with mmap(MAP_PRIVATE) and reads every page, then compares the whole mapping with
 * the bytes of EXPECTED (read with read(2)). Used by tests/clients/run-clients.sh on a file
 * served by gguf-mount, with EXPECTED the planner's bytes written by `gguf-mount merge`.
 *
 * Usage: mmap_pages FILE EXPECTED
 * Prints "FILE: N pages of P bytes mapped and read, M bytes equal" and exits 0, or prints one
 * line naming the file and the problem and exits 1 (2 on usage errors).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static int fail(const char *path, const char *what) {
    fprintf(stderr, "mmap_pages: %s: %s: %s\n", path, what, strerror(errno));
    return 1;
}

/* Reads all of `path` into a malloc'd buffer of *size bytes; NULL on error. */
static unsigned char *read_all(const char *path, size_t *size) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return NULL;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        close(fd);
        return NULL;
    }
    unsigned char *buf = malloc(st.st_size > 0 ? (size_t)st.st_size : 1);
    size_t done = 0;
    while (buf && done < (size_t)st.st_size) {
        ssize_t n = read(fd, buf + done, (size_t)st.st_size - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            free(buf);
            buf = NULL;
            break;
        }
        done += (size_t)n;
    }
    close(fd);
    *size = done;
    return buf;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: mmap_pages FILE EXPECTED\n");
        return 2;
    }
    const char *path = argv[1];
    size_t expected_size = 0;
    unsigned char *expected = read_all(argv[2], &expected_size);
    if (!expected) return fail(argv[2], "cannot read");

    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return fail(path, "cannot open");
    struct stat st;
    if (fstat(fd, &st) != 0) return fail(path, "cannot stat");
    size_t size = (size_t)st.st_size;
    if (size != expected_size) {
        fprintf(stderr, "mmap_pages: %s: size %zu, expected %zu\n", path, size, expected_size);
        return 1;
    }
    if (size == 0) {
        printf("%s: empty file, nothing to map\n", path);
        return 0;
    }
    const unsigned char *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED) return fail(path, "mmap(MAP_PRIVATE) failed");
    close(fd); /* the mapping keeps the file open */

    long page = sysconf(_SC_PAGESIZE);
    size_t pages = 0;
    volatile unsigned char sink = 0;
    for (size_t off = 0; off < size; off += (size_t)page) {
        sink ^= map[off]; /* one fault per page, in order, as a model loader touches them */
        ++pages;
    }
    (void)sink;
    for (size_t off = 0; off < size; ++off) {
        if (map[off] != expected[off]) {
            fprintf(stderr, "mmap_pages: %s: byte %zu is 0x%02x, expected 0x%02x\n", path, off, map[off],
                    expected[off]);
            return 1;
        }
    }
    munmap((void *)map, size);
    free(expected);
    printf("%s: %zu pages of %ld bytes mapped and read, %zu bytes equal\n", path, pages, page, size);
    return 0;
}
