/* SPDX-License-Identifier: MIT */
/*
 * cusefloor — the CUSE floor that ucmd's request path is compared with
 * (issue 13, docs/perf.md): a libfuse3 CUSE character device whose write
 * handler does nothing but answer, served by libfuse's own multi-threaded
 * loop (threads blocked in read(2) on /dev/cuse, the reply one writev).
 *
 *   cusefloor DEVNAME [--pvw] [-s]
 *
 * DEVNAME is the node under /dev (e.g. infiniband/ucmfloor). With --pvw the
 * handler also does what every ucm command does at least once: it reads
 * the response pointer of a CREATE_ID-shaped command (the u64 at byte 16 of
 * the write) and writes a 4-byte id there with one process_vm_writev(2)
 * into the caller. -s runs libfuse's single-threaded loop instead.
 *
 * The process stays in the foreground; stop it with SIGTERM.
 */
#define FUSE_USE_VERSION 31
#define _GNU_SOURCE
#include <cuse_lowlevel.h>
#include <fuse_lowlevel.h>

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

static int pvw;

static void floor_open(fuse_req_t req, struct fuse_file_info *fi)
{
	fi->direct_io = 1;
	fuse_reply_open(req, fi);
}

static void floor_write(fuse_req_t req, const char *buf, size_t size, off_t off,
			struct fuse_file_info *fi)
{
	(void)off;
	(void)fi;
	if (pvw) {
		uint64_t resp;
		if (size < 24) {
			fuse_reply_err(req, EINVAL);
			return;
		}
		memcpy(&resp, buf + 16, sizeof(resp));
		uint32_t id = 1;
		struct iovec local = { .iov_base = &id, .iov_len = sizeof(id) };
		struct iovec remote = { .iov_base = (void *)(uintptr_t)resp, .iov_len = sizeof(id) };
		if (process_vm_writev(fuse_req_ctx(req)->pid, &local, 1, &remote, 1, 0) != sizeof(id)) {
			fuse_reply_err(req, EFAULT);
			return;
		}
	}
	fuse_reply_write(req, size);
}

static const struct cuse_lowlevel_ops ops = {
	.open = floor_open,
	.write = floor_write,
};

int main(int argc, char **argv)
{
	int single = 0;
	const char *name = NULL;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--pvw"))
			pvw = 1;
		else if (!strcmp(argv[i], "-s"))
			single = 1;
		else if (!name && argv[i][0] != '-')
			name = argv[i];
		else {
			fprintf(stderr, "usage: cusefloor DEVNAME [--pvw] [-s]\n");
			return 2;
		}
	}
	if (!name) {
		fprintf(stderr, "usage: cusefloor DEVNAME [--pvw] [-s]\n");
		return 2;
	}
	char devarg[256];
	snprintf(devarg, sizeof(devarg), "DEVNAME=%s", name);
	const char *dev_info[] = { devarg };
	struct cuse_info ci = { .dev_info_argc = 1, .dev_info_argv = dev_info };
	char *fargv[] = { argv[0], "-f", single ? "-s" : NULL, NULL };
	int fargc = single ? 3 : 2;
	return cuse_lowlevel_main(fargc, fargv, &ci, &ops, NULL);
}
