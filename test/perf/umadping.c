// umadping: the floor under one CM MAD's trip through umad, the path every
// MAD ucmd sends and receives takes. Two CM-class agents, one on each of two
// RDMA devices (rxe0 and rxe1 in the test VM), bounce a MAD back and forth:
// write(2) on one umad file, the HCA (rxe: its send task, the veth pair, its
// receive path), the other device's MAD layer, and a read(2) blocked on the
// other file, with nothing above umad. The kernel's CM (ib_cm) must be
// unloaded: it owns the CM class while loaded.
//
// Usage: umadping -a DEV -b DEV -g GID_B [-G GID_A] [-n N] [-w W] [-L label]
// Prints: umadping label=... n=... window=W us_per_trip=... mads_per_s=... guest_cpu_us=...
// us_per_trip is one way (a round trip / 2) and means a latency with -w 1,
// the default; with -w W, W MADs bounce at once and mads_per_s (MADs
// through umad per second, both ways counted) is the guest's capacity:
// what a CM sending every MAD through umad could at most carry with many
// connections in flight, and guest_cpu_us what each MAD costs the guest
// (docs/perf.md, "A bound with many in flight").
//
// With -x DEV (and -w 1) each of the n rounds is a CM-only connection's
// critical path at the floors instead of one round trip ("the floor
// chain", docs/perf.md "A connection at the floors"): four trips (REQ,
// REP, DREQ, DREP), and seven no-op writes on the CUSE device DEV (the
// libfuse3 floor with --pvw) where a connection's clients wait for their
// commands: three before the REQ (DESTROY_ID, CREATE_ID, SEND_REQ), one on
// the far side before each answer (SEND_REP, SEND_DREP), and two before
// the DREQ (SEND_RTU, SEND_DREQ). Each side is its own process with its own
// open file, as the two clients are. Prints us_per_conn instead.
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include <rdma/ib_user_mad.h>

#include "guestcpu.h"

#define MAD_SIZE 256
#define CM_CLASS 0x07
#define CM_VERSION 2
#define METHOD_SEND 0x03
#define QKEY_GSI 0x80010000u

static void die(const char *what) {
	fprintf(stderr, "umadping: %s: %s\n", what, strerror(errno));
	exit(1);
}

// umad_for opens the umad file of port 1 of ibdev.
static int umad_for(const char *ibdev) {
	DIR *d = opendir("/sys/class/infiniband_mad");
	if (!d)
		die("/sys/class/infiniband_mad");
	struct dirent *e;
	while ((e = readdir(d))) {
		if (strncmp(e->d_name, "umad", 4) != 0)
			continue;
		char path[320], name[64] = "", port[16] = "";
		snprintf(path, sizeof path, "/sys/class/infiniband_mad/%s/ibdev", e->d_name);
		FILE *f = fopen(path, "r");
		if (!f || !fgets(name, sizeof name, f)) {
			if (f)
				fclose(f);
			continue;
		}
		fclose(f);
		snprintf(path, sizeof path, "/sys/class/infiniband_mad/%s/port", e->d_name);
		if ((f = fopen(path, "r"))) {
			if (!fgets(port, sizeof port, f))
				port[0] = 0;
			fclose(f);
		}
		name[strcspn(name, "\n")] = 0;
		if (strcmp(name, ibdev) != 0 || atoi(port) != 1)
			continue;
		snprintf(path, sizeof path, "/dev/infiniband/%s", e->d_name);
		closedir(d);
		int fd = open(path, O_RDWR);
		if (fd < 0)
			die(path);
		return fd;
	}
	closedir(d);
	fprintf(stderr, "umadping: no umad file for %s port 1\n", ibdev);
	exit(1);
}

// agent registers for unsolicited CM Send MADs on QP1.
static uint32_t agent(int fd) {
	if (ioctl(fd, IB_USER_MAD_ENABLE_PKEY) < 0)
		die("IB_USER_MAD_ENABLE_PKEY");
	struct ib_user_mad_reg_req req;
	memset(&req, 0, sizeof req);
	req.qpn = 1;
	req.mgmt_class = CM_CLASS;
	req.mgmt_class_version = CM_VERSION;
	req.method_mask[0] = 1ul << METHOD_SEND;
	if (ioctl(fd, IB_USER_MAD_REGISTER_AGENT, &req) < 0)
		die("IB_USER_MAD_REGISTER_AGENT (is ib_cm loaded?)");
	return req.id;
}

struct msg {
	struct ib_user_mad_hdr h;
	uint8_t mad[MAD_SIZE];
};

static void send_to(int fd, uint32_t id, const uint8_t gid[16], uint64_t tid) {
	struct msg m;
	memset(&m, 0, sizeof m);
	m.h.id = id;
	m.h.qpn = htonl(1);
	m.h.qkey = htonl(QKEY_GSI);
	m.h.lid = htons(0xffff); // RoCE: the GRH routes; permissive LID
	m.h.grh_present = 1;
	m.h.hop_limit = 64;
	memcpy(m.h.gid, gid, 16);
	m.mad[0] = 1; // base version
	m.mad[1] = CM_CLASS;
	m.mad[2] = CM_VERSION;
	m.mad[3] = METHOD_SEND;
	for (int i = 0; i < 8; i++)
		m.mad[8 + i] = (uint8_t)(tid >> (56 - 8 * i));
	m.mad[16] = 0x00; // attribute: an unused CM id, nobody decodes it
	m.mad[17] = 0x7f;
	for (;;) {
		ssize_t n = write(fd, &m, sizeof m);
		if (n == (ssize_t)sizeof m)
			return;
		if (n < 0 && errno == EINTR)
			continue;
		die("umad write");
	}
}

static void recv_one(int fd, struct msg *m) {
	for (;;) {
		ssize_t n = read(fd, m, sizeof *m);
		if (n == (ssize_t)sizeof *m && m->h.status == 0)
			return;
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			die("umad read");
	}
}

// recv_within reads one MAD, or fails the run when none comes within
// 5 s: with W in flight a lost MAD would otherwise hang it. With one in
// flight the trip is the latency measured, so it stays a blocking read
// with no poll before it.
static void recv_within(int fd, struct msg *m) {
	struct pollfd p = { .fd = fd, .events = POLLIN };
	int r;
	while ((r = poll(&p, 1, 5000)) < 0 && errno == EINTR)
		;
	if (r < 0)
		die("poll");
	if (r == 0) {
		fprintf(stderr, "umadping: no MAD back within 5 s (lost?)\n");
		exit(1);
	}
	recv_one(fd, m);
}

// exchange makes k writes on the floor device: each a 24-byte
// CREATE_ID-shaped command whose response pointer (byte 16) the floor
// fills in, as cmdbench's floor mode writes it.
static void exchange(int fd, int k) {
	uint32_t id;
	for (int i = 0; i < k; i++) {
		uint8_t cmd[24] = { 0 };
		cmd[4] = 16; // in: the command after the header
		cmd[6] = sizeof id; // out
		uint64_t resp = (uintptr_t)&id;
		memcpy(cmd + 16, &resp, sizeof resp);
		if (write(fd, cmd, sizeof cmd) != (ssize_t)sizeof cmd)
			die("floor write");
	}
}

static int open_floor(const char *path) {
	int fd = open(path, O_RDWR);
	if (fd < 0)
		die(path);
	return fd;
}

static double now(void) {
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
	const char *a = "rxe0", *b = "rxe1", *label = "umad", *gb = NULL, *floor = NULL;
	int n = 1000, w = 1, c;
	while ((c = getopt(argc, argv, "a:b:g:n:w:x:L:")) != -1) {
		switch (c) {
		case 'a': a = optarg; break;
		case 'b': b = optarg; break;
		case 'g': gb = optarg; break;
		case 'n': n = atoi(optarg); break;
		case 'w': w = atoi(optarg); break;
		case 'x': floor = optarg; break;
		case 'L': label = optarg; break;
		default:
			fprintf(stderr, "usage: umadping -a DEV -b DEV -g GID_OF_B [-n N] [-w W | -x CUSEDEV] [-L label]\n");
			return 2;
		}
	}
	uint8_t gidb[16];
	if (!gb || inet_pton(AF_INET6, gb, gidb) != 1) {
		fprintf(stderr, "umadping: -g GID (of device -b, port 1) is required\n");
		return 2;
	}
	if (n < 1 || w < 1 || w > n || w > 100) {
		fprintf(stderr, "umadping: need 1 <= -w <= min(-n, 100)\n");
		return 2;
	}
	if (floor && w != 1) {
		fprintf(stderr, "umadping: -x is a chain of one connection at a time: no -w\n");
		return 2;
	}
	int fa = umad_for(a), fb = umad_for(b);
	uint32_t ida = agent(fa), idb = agent(fb);

	// b answers every MAD to its sender, as the address umad reports it.
	pid_t child = fork();
	if (child < 0)
		die("fork");
	if (child == 0) {
		int xf = floor ? open_floor(floor) : -1;
		struct msg m;
		for (;;) {
			recv_one(fb, &m);
			if (xf >= 0)
				exchange(xf, 1); // SEND_REP, SEND_DREP
			uint64_t tid = 0;
			for (int i = 0; i < 8; i++)
				tid = tid << 8 | m.mad[8 + i];
			send_to(fb, idb, m.h.gid, tid);
		}
	}
	struct msg m;
	for (int i = 0; i < 20; i++) { // warm-up: neighbour discovery, caches
		send_to(fa, ida, gidb, i);
		recv_one(fa, &m);
	}
	if (floor) {
		int xf = open_floor(floor);
		long long busy0 = guest_busy_ticks();
		double t0 = now();
		for (int i = 0; i < n; i++) {
			exchange(xf, 3); // DESTROY_ID, CREATE_ID, SEND_REQ
			send_to(fa, ida, gidb, 2000 + 2 * (uint64_t)i); // REQ
			recv_one(fa, &m); // REP
			exchange(xf, 2); // SEND_RTU, SEND_DREQ
			send_to(fa, ida, gidb, 2001 + 2 * (uint64_t)i); // DREQ
			recv_one(fa, &m); // DREP
		}
		double t = now() - t0;
		long long busy1 = guest_busy_ticks();
		kill(child, 9);
		printf("umadping label=%s n=%d chain=1 us_per_conn=%.1f conn_per_s=%.1f guest_cpu_us=%.1f\n", label, n,
		       t / n * 1e6, n / t, guest_cpu_us(busy0, busy1, n));
		return 0;
	}
	// n round trips, w of them in flight at once: each MAD back sends
	// the next until n were sent
	long long busy0 = guest_busy_ticks();
	double t0 = now();
	int sent = 0;
	for (; sent < w; sent++)
		send_to(fa, ida, gidb, 1000 + (uint64_t)sent);
	for (int got = 0; got < n; got++) {
		if (w > 1)
			recv_within(fa, &m);
		else
			recv_one(fa, &m);
		if (sent < n)
			send_to(fa, ida, gidb, 1000 + (uint64_t)sent++);
	}
	double t = now() - t0;
	long long busy1 = guest_busy_ticks();
	kill(child, 9);
	printf("umadping label=%s n=%d window=%d us_per_trip=%.1f mads_per_s=%.1f guest_cpu_us=%.1f\n", label,
	       n, w, t / n / 2 * 1e6, 2 * n / t, guest_cpu_us(busy0, busy1, 2.0 * n));
	return 0;
}
