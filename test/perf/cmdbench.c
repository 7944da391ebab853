/* SPDX-License-Identifier: MIT */
/*
 * cmdbench — the per-command cost of a ucm node, and of the CUSE floor it
 * is compared with (issue 13, docs/perf.md).
 *
 *   cmdbench -D PATH [-m ucm|floor|floorpvw] [-n PAIRS] [-t THREADS] [-k PREFILL]
 *            [-p DAEMON_PID] [-w WARMUP] [-l LABEL]
 *
 * THREADS threads share one open file, as libibcm's callers share one
 * device fd; each does PAIRS pairs of writes after WARMUP untimed ones:
 *   ucm:   CREATE_ID + DESTROY_ID (both responses checked)
 *   floor: two 24-byte CREATE_ID-shaped writes (cusefloor answers any write)
 *   floorpvw: the same against cusefloor --pvw, which fills in the response
 *          word: that is checked
 * Every write blocks; nothing polls, as libibcm never did.
 *
 * -k creates PREFILL idle ids first (on the same fd), to compare the
 * per-command cost at 1k and 100k live ids, and reports the daemon's RSS
 * growth per id. -p samples the daemon's threads in /proc around the timed
 * part: CPU time (schedstat, ns) and context switches, in all and per
 * thread. Output: one line of key=value pairs (test/perf/summarize reads it).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "guestcpu.h"

#include "../clients/ucm_abi.h"

static int fd;
static int floor_mode, check_floor;
static long pairs = 5000, warm = 200;
static pthread_barrier_t start_line;

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void die(const char *what)
{
	fprintf(stderr, "cmdbench: %s: %s\n", what, strerror(errno));
	exit(1);
}

static int create_id(uint64_t uid, uint32_t *id)
{
	struct {
		struct ib_ucm_cmd_hdr h;
		struct ib_ucm_create_id c;
	} __attribute__((packed)) m = {
		.h = { .cmd = IB_USER_CM_CMD_CREATE_ID, .in = sizeof(m.c), .out = sizeof(*id) },
		.c = { .uid = uid, .response = (uintptr_t)id },
	};
	*id = UINT32_MAX;
	if (write(fd, &m, sizeof(m)) != (ssize_t)sizeof(m))
		return -1;
	if (*id == UINT32_MAX && (!floor_mode || check_floor)) {
		errno = EPROTO; /* the response was not written */
		return -1;
	}
	return 0;
}

static int destroy_id(uint32_t id)
{
	uint32_t er = UINT32_MAX;
	struct {
		struct ib_ucm_cmd_hdr h;
		struct ib_ucm_destroy_id d;
	} __attribute__((packed)) m = {
		.h = { .cmd = IB_USER_CM_CMD_DESTROY_ID, .in = sizeof(m.d), .out = sizeof(er) },
		.d = { .response = (uintptr_t)&er, .id = id },
	};
	if (write(fd, &m, sizeof(m)) != (ssize_t)sizeof(m))
		return -1;
	if (er != 0) {
		errno = EPROTO;
		return -1;
	}
	return 0;
}

static int one_pair(uint64_t uid)
{
	uint32_t id;
	if (floor_mode) {
		/* cusefloor: any write; with --pvw it writes 1 into *id */
		for (int i = 0; i < 2; i++)
			if (create_id(uid, &id))
				return -1;
		return 0;
	}
	if (create_id(uid, &id))
		return -1;
	return destroy_id(id);
}

/* prefill: 4 threads create the idle ids, to keep 100,000 of them quick */
static long prefill_each;

static void *filler(void *arg)
{
	uint64_t base = (uintptr_t)arg * (uint64_t)prefill_each;
	for (long i = 0; i < prefill_each; i++) {
		uint32_t id;
		if (create_id(base + (uint64_t)i, &id))
			die("prefill CREATE_ID");
	}
	return NULL;
}

static void *worker(void *arg)
{
	uint64_t uid = (uintptr_t)arg;
	for (long i = 0; i < warm; i++)
		if (one_pair(uid))
			die("warm-up pair");
	pthread_barrier_wait(&start_line); /* warmed up */
	pthread_barrier_wait(&start_line); /* go: the main thread took its "before" */
	for (long i = 0; i < pairs; i++)
		if (one_pair(uid))
			die("pair");
	pthread_barrier_wait(&start_line); /* done */
	return NULL;
}

/* ------------------------------------------------------------------------ */
/* The daemon's threads, from /proc                                         */

struct task {
	int tid;
	uint64_t run_ns, vol, invol;
};

struct sample {
	int n;
	struct task t[512];
};

static int read_task(int pid, int tid, struct task *t)
{
	char path[128], line[256];
	snprintf(path, sizeof(path), "/proc/%d/task/%d/schedstat", pid, tid);
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	unsigned long long run = 0;
	if (fscanf(f, "%llu", &run) != 1)
		run = 0;
	fclose(f);
	snprintf(path, sizeof(path), "/proc/%d/task/%d/status", pid, tid);
	if (!(f = fopen(path, "r")))
		return -1;
	t->tid = tid;
	t->run_ns = run;
	t->vol = t->invol = 0;
	while (fgets(line, sizeof(line), f)) {
		unsigned long long v;
		if (sscanf(line, "voluntary_ctxt_switches: %llu", &v) == 1)
			t->vol = v;
		else if (sscanf(line, "nonvoluntary_ctxt_switches: %llu", &v) == 1)
			t->invol = v;
	}
	fclose(f);
	return 0;
}

static void take(int pid, struct sample *s)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/task", pid);
	DIR *d = opendir(path);
	if (!d)
		die("open the daemon's /proc/PID/task");
	s->n = 0;
	struct dirent *e;
	while ((e = readdir(d)) && s->n < (int)(sizeof(s->t) / sizeof(s->t[0]))) {
		if (e->d_name[0] == '.')
			continue;
		if (read_task(pid, atoi(e->d_name), &s->t[s->n]) == 0)
			s->n++;
	}
	closedir(d);
}

static long rss_kib(int pid)
{
	char path[64], line[256];
	snprintf(path, sizeof(path), "/proc/%d/status", pid);
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	long v = -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "VmRSS: %ld", &v) == 1)
			break;
	fclose(f);
	return v;
}

static int by_switches(const void *a, const void *b)
{
	const struct task *x = a, *y = b;
	uint64_t sx = x->vol + x->invol, sy = y->vol + y->invol;
	return sx < sy ? 1 : sx > sy ? -1 : 0;
}

/* report prints the daemon's CPU and switches per command between two samples */
static void report(const struct sample *a, const struct sample *b, double cmds)
{
	struct sample d = { 0 };
	uint64_t run = 0, vol = 0, invol = 0;
	for (int i = 0; i < b->n; i++) {
		struct task t = b->t[i], z = { 0 };
		for (int j = 0; j < a->n; j++)
			if (a->t[j].tid == t.tid)
				z = a->t[j];
		t.run_ns -= z.run_ns;
		t.vol -= z.vol;
		t.invol -= z.invol;
		run += t.run_ns;
		vol += t.vol;
		invol += t.invol;
		if (t.vol + t.invol > 0)
			d.t[d.n++] = t;
	}
	qsort(d.t, (size_t)d.n, sizeof(d.t[0]), by_switches);
	printf(" daemon_cpu_us_per_cmd=%.2f ctxsw_per_cmd=%.3f ctxsw_vol_per_cmd=%.3f daemon_threads=%d"
	       " busy_threads=%d ctxsw_per_thread=",
	       (double)run / 1e3 / cmds, (double)(vol + invol) / cmds, (double)vol / cmds, b->n, d.n);
	for (int i = 0; i < d.n && i < 8; i++)
		printf("%s%.3f", i ? "," : "", (double)(d.t[i].vol + d.t[i].invol) / cmds);
}

int main(int argc, char **argv)
{
	const char *path = NULL, *label = "run";
	long threads = 1, prefill = 0;
	int pid = 0, opt;
	while ((opt = getopt(argc, argv, "D:m:n:t:k:p:w:l:")) != -1) {
		switch (opt) {
		case 'D': path = optarg; break;
		case 'm':
			if (!strcmp(optarg, "floor"))
				floor_mode = 1;
			else if (!strcmp(optarg, "floorpvw"))
				floor_mode = check_floor = 1;
			else if (strcmp(optarg, "ucm")) {
				fprintf(stderr, "cmdbench: -m ucm, floor or floorpvw\n");
				return 2;
			}
			break;
		case 'n': pairs = atol(optarg); break;
		case 't': threads = atol(optarg); break;
		case 'k': prefill = atol(optarg); break;
		case 'p': pid = atoi(optarg); break;
		case 'w': warm = atol(optarg); break;
		case 'l': label = optarg; break;
		default:
			fprintf(stderr, "usage: cmdbench -D PATH [-m ucm|floor|floorpvw] [-n PAIRS] [-t THREADS] [-k PREFILL] [-p PID] [-w WARMUP] [-l LABEL]\n");
			return 2;
		}
	}
	if (!path || pairs < 1 || threads < 1 || threads > 64 || prefill < 0) {
		fprintf(stderr, "cmdbench: need -D PATH, PAIRS >= 1, 1..64 THREADS\n");
		return 2;
	}
	if ((fd = open(path, O_RDWR | O_CLOEXEC)) < 0)
		die(path);

	long rss0 = pid ? rss_kib(pid) : -1;
	if (prefill > 0) {
		pthread_t f[4];
		prefill_each = (prefill + 3) / 4;
		prefill = prefill_each * 4;
		for (long i = 0; i < 4; i++)
			if ((errno = pthread_create(&f[i], NULL, filler, (void *)(uintptr_t)i)))
				die("pthread_create");
		for (long i = 0; i < 4; i++)
			pthread_join(f[i], NULL);
	}
	long rss1 = pid ? rss_kib(pid) : -1;

	pthread_barrier_init(&start_line, NULL, (unsigned)threads + 1);
	pthread_t th[64];
	for (long i = 0; i < threads; i++)
		if ((errno = pthread_create(&th[i], NULL, worker, (void *)(uintptr_t)(i + 1))))
			die("pthread_create");
	static struct sample before, after;
	/*
	 * Everything "before" is read while the workers wait between the two
	 * barriers, so that the clock starts before the first timed pair: the
	 * main thread shares two vCPUs with the workers and the daemon, and
	 * reading the daemon's /proc files can hold it for longer than a run.
	 */
	pthread_barrier_wait(&start_line); /* all warmed up */
	if (pid)
		take(pid, &before);
	long long busy0 = guest_busy_ticks();
	double t0 = now_s();
	pthread_barrier_wait(&start_line); /* go */
	pthread_barrier_wait(&start_line); /* all done */
	double t1 = now_s();
	long long busy1 = guest_busy_ticks();
	if (pid)
		take(pid, &after);
	for (long i = 0; i < threads; i++)
		pthread_join(th[i], NULL);

	double total = (double)pairs * (double)threads, wall = t1 - t0;
	printf("cmdbench label=%s mode=%s threads=%ld pairs=%ld prefill=%ld wall_s=%.4f"
	       " us_per_pair=%.2f pairs_per_s=%.1f",
	       label, check_floor ? "floorpvw" : floor_mode ? "floor" : "ucm", threads, pairs, prefill, wall,
	       wall * 1e6 / (double)pairs, total / wall);
	printf(" guest_cpu_us=%.1f", guest_cpu_us(busy0, busy1, total * 2)); /* per command */
	if (pid)
		report(&before, &after, total * 2);
	if (prefill > 0 && rss0 > 0 && rss1 > 0)
		printf(" rss_bytes_per_id=%.1f", (double)(rss1 - rss0) * 1024.0 / (double)prefill);
	printf("\n");
	return 0;
}
