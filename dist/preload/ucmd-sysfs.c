/* SPDX-License-Identifier: MIT */
/*
 * libucmd-sysfs.so — an LD_PRELOAD shim that shows a libibcm program the
 * /sys/class/infiniband_cm tree ucmd writes into its runtime directory.
 *
 * libibcm finds its device by reading /sys/class/infiniband_cm/abi_version
 * and the hard-coded /sys/class/infiniband_cm/ucmN/ibdev, which kernels
 * without ib_ucm lack and userspace cannot create in sysfs. `ucmd exec`
 * shows the tree through a private mount namespace, which needs root; under
 * an MPI launcher or a batch system, where every rank is started for the
 * user and must keep its environment, this shim does the same from inside
 * the process, without privileges:
 *
 *     LD_PRELOAD=/usr/lib/ucmd/libucmd-sysfs.so prog args...
 *
 * Every open of a path under /sys/class/infiniband_cm (open, openat with an
 * absolute path, fopen and their 64-bit and fortified variants, the calls
 * libibverbs' ibv_read_sysfs_file and libibcm make) opens the same path
 * under $UCMD_CLASS_DIR/infiniband_cm instead (default /run/ucmd/class, the
 * tree of `ucmd serve --runtime-dir /run/ucmd`; a relative value is
 * ignored). Nothing else changes: stat, opendir, a relative openat and
 * glibc's own opens see the real sysfs. A statically linked program, or
 * one that reads sysfs through raw system calls, needs `ucmd exec`.
 */
/* This file defines open and open64 both: glibc must not rename one to
 * the other (32-bit builds with large-file or 64-bit time flags). */
#undef _FILE_OFFSET_BITS
#undef _TIME_BITS
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

static const char prefix[] = "/sys/class/infiniband_cm";

/* mapped returns path, or the same path in ucmd's tree, written to buf. */
static const char *mapped(const char *path, char *buf, size_t size)
{
	size_t n = sizeof(prefix) - 1;
	if (path == NULL || strncmp(path, prefix, n) != 0 || (path[n] != '\0' && path[n] != '/'))
		return path;
	const char *dir = getenv("UCMD_CLASS_DIR");
	if (dir == NULL || dir[0] != '/')
		dir = "/run/ucmd/class";
	int w = snprintf(buf, size, "%s/infiniband_cm%s", dir, path + n);
	if (w < 0 || (size_t)w >= size)
		return path; /* too long to map: the original fails as before */
	return buf;
}

/* next returns the function the shim stands in front of, looked up once
 * into *cache (by any thread: each stores the same pointer), or NULL with
 * errno ENOSYS. */
static void *next(void **cache, const char *name)
{
	void *f = __atomic_load_n(cache, __ATOMIC_ACQUIRE);
	if (f == NULL) {
		f = dlsym(RTLD_NEXT, name);
		if (f == NULL) {
			errno = ENOSYS;
			return NULL;
		}
		__atomic_store_n(cache, f, __ATOMIC_RELEASE);
	}
	return f;
}

/* mode is open's third argument, present when the flags ask for one. */
#define MODE_ARG(flags, mode)                                                  \
	do {                                                                   \
		if ((flags) & O_CREAT || ((flags) & O_TMPFILE) == O_TMPFILE) { \
			va_list ap;                                            \
			va_start(ap, flags);                                   \
			mode = va_arg(ap, mode_t);                             \
			va_end(ap);                                            \
		}                                                              \
	} while (0)

#define OPEN(name)                                                            \
	int name(const char *path, int flags, ...)                            \
	{                                                                     \
		static void *cache;                                           \
		char buf[PATH_MAX];                                           \
		mode_t mode = 0;                                              \
		MODE_ARG(flags, mode);                                        \
		int (*real)(const char *, int, ...) = next(&cache, #name);    \
		if (real == NULL)                                             \
			return -1;                                            \
		return real(mapped(path, buf, sizeof(buf)), flags, mode);     \
	}

#define OPENAT(name)                                                              \
	int name(int dirfd, const char *path, int flags, ...)                     \
	{                                                                         \
		static void *cache;                                               \
		char buf[PATH_MAX];                                               \
		mode_t mode = 0;                                                  \
		MODE_ARG(flags, mode);                                            \
		int (*real)(int, const char *, int, ...) = next(&cache, #name);   \
		if (real == NULL)                                                 \
			return -1;                                                \
		return real(dirfd, mapped(path, buf, sizeof(buf)), flags, mode); \
	}

#define OPEN_2(name)                                                   \
	int name(const char *path, int flags)                          \
	{                                                              \
		static void *cache;                                    \
		char buf[PATH_MAX];                                    \
		int (*real)(const char *, int) = next(&cache, #name);  \
		if (real == NULL)                                      \
			return -1;                                     \
		return real(mapped(path, buf, sizeof(buf)), flags);    \
	}

#define OPENAT_2(name)                                                     \
	int name(int dirfd, const char *path, int flags)                   \
	{                                                                  \
		static void *cache;                                        \
		char buf[PATH_MAX];                                        \
		int (*real)(int, const char *, int) = next(&cache, #name); \
		if (real == NULL)                                          \
			return -1;                                         \
		return real(dirfd, mapped(path, buf, sizeof(buf)), flags); \
	}

#define FOPEN(name)                                                             \
	FILE *name(const char *path, const char *how)                           \
	{                                                                       \
		static void *cache;                                             \
		char buf[PATH_MAX];                                             \
		FILE *(*real)(const char *, const char *) = next(&cache, #name); \
		if (real == NULL)                                               \
			return NULL;                                            \
		return real(mapped(path, buf, sizeof(buf)), how);               \
	}

/* The prototypes fcntl.h and stdio.h declare are the ones defined here. */
OPEN(open)
OPEN(open64)
OPENAT(openat)
OPENAT(openat64)
OPEN_2(__open_2)
OPEN_2(__open64_2)
OPENAT_2(__openat_2)
OPENAT_2(__openat64_2)
FOPEN(fopen)
FOPEN(fopen64)
