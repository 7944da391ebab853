/* SPDX-License-Identifier: MIT */
/*
 * ucmclient — a test client that speaks the raw /dev/infiniband/ucmN ABI
 * (ib_ucm, ABI 5) the way libibcm did, byte for byte, and moves RC data over
 * the connections it makes with libibverbs.
 *
 * Faithful to libibcm where it shows on the wire or in discovery:
 *   - abi_version from $SYSFS_PATH (or /sys) + /class/infiniband_cm/abi_version,
 *     4..5 accepted, unreadable -> warning and ABI-5 commands;
 *   - /sys/class/infiniband_cm/ucm<i>/ibdev scanned (hard-coded /sys, i < 32);
 *   - /dev/infiniband/ucm<i> opened O_RDWR, one fd shared by every id;
 *   - one write() per command: 8-byte header + command struct, in = sizeof
 *     (command), out = sizeof(response) or 0; responses through pointers;
 *   - CREATE_ID uid = pointer to our per-id object, SEND_REP uid = the new
 *     id's own object, GET_EVENT with 255-byte data and info buffers;
 *   - INIT_QP_ATTR result converted field by field to ibv_qp_attr (as
 *     ibv_copy_qp_attr_from_kern did, qp_state left as requested) and applied
 *     with exactly the returned mask;
 *   - DESTROY_ID's events_reported compared with the events we took per id.
 *
 * Everything is driven by one poll() loop over the ucm fd and a verbs
 * completion channel, with a deadline on every wait.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef UCMCLIENT_NO_VERBS
#include <infiniband/verbs.h>
#else
/*
 * Built without libibverbs (build.sh --no-libverbs, and -m32: a static
 * 32-bit client needs no i386 libraries). Only --no-verbs runs; the raw ucm
 * ABI path is the same code. The kernel's UAPI copies below still check our
 * layouts; these stand in for the few verbs fields the shared code names.
 */
#include <rdma/ib_user_verbs.h>
#define IBV_SYSFS_NAME_MAX 64
#define IBV_LINK_LAYER_ETHERNET 2
struct ibv_device_attr {
	int max_qp_rd_atom, max_qp_init_rd_atom;
};
struct ibv_port_attr {
	int state, active_mtu, gid_tbl_len;
	uint16_t lid;
	uint8_t link_layer;
};
struct ibv_comp_channel {
	int fd;
};
#endif
#include <rdma/ib_user_sa.h>

#include "ucm_abi.h"
#include "../perf/guestcpu.h" /* make perf: guest_cpu_us= */

/* Our layouts must also agree with the system's uverbs/SA UAPI copies. */
_Static_assert(sizeof(struct ucm_uverbs_qp_attr) == sizeof(struct ib_uverbs_qp_attr), "qp_attr");
_Static_assert(offsetof(struct ucm_uverbs_qp_attr, alt_timeout) ==
		       offsetof(struct ib_uverbs_qp_attr, alt_timeout),
	       "qp_attr.alt_timeout");
_Static_assert(offsetof(struct ucm_uverbs_qp_attr, ah_attr) ==
		       offsetof(struct ib_uverbs_qp_attr, ah_attr),
	       "qp_attr.ah_attr");
_Static_assert(sizeof(struct ucm_uverbs_ah_attr) == sizeof(struct ib_uverbs_ah_attr), "ah_attr");
_Static_assert(offsetof(struct ucm_uverbs_ah_attr, port_num) ==
		       offsetof(struct ib_uverbs_ah_attr, port_num),
	       "ah_attr.port_num");
_Static_assert(sizeof(struct ucm_user_path_rec) == sizeof(struct ib_user_path_rec), "path_rec");
_Static_assert(offsetof(struct ucm_user_path_rec, pkey) == offsetof(struct ib_user_path_rec, pkey),
	       "path_rec.pkey");
_Static_assert(offsetof(struct ucm_user_path_rec, preference) ==
		       offsetof(struct ib_user_path_rec, preference),
	       "path_rec.preference");

#define PROG "ucmclient"
#define MAX_UCM_DEVS 32 /* libibcm scanned ucm0..ucm31 */
#define EVENT_BUF 255   /* libibcm's data/info buffer size */
#define CANARY 0xa5
#define DEFAULT_SID 0x1000ULL /* cmpost's service id */

/* ------------------------------------------------------------------------ */
/* Options                                                                   */

static struct {
	int server;        /* -l */
	int client;        /* -c */
	uint64_t sid;      /* host order */
	const char *devname;
	const char *ucm_path; /* -D */
	int port;
	int gid_index;
	int have_rgid, have_sgid, have_gid_index;
	uint8_t rgid[16], sgid[16];
	int dlid; /* IB only */
	int slid; /* IB, --no-verbs only (verbs: the port's LID) */
	long count;    /* -n */
	int parallel;  /* -P */
	int msgs;      /* -M */
	int msg_size;  /* -z */
	int wait_ms;   /* -t */
	int deadline_s; /* -T */
	int hold_ms;    /* --hold: client pauses after the data, before DREQ */
	int burst;      /* --burst: -P started at once, held until all are up */
	int timewait_ms; /* -w */
	int no_verbs;
	int data_before_rtu;
	int nonblock;
	int libibcm; /* --libibcm: blocking GET_EVENT, no poll(), no per-command timer */
	int cmd_times; /* --cmd-times */
	int lax;
	int verbose;
	int quiet; /* -q: no line per connection that succeeded (the perf loops) */
	int dump;
	int cred_check;	       /* --cred-check */
	const char *cred_exec; /* --cred-check-exec FD:A:B (internal) */
	int mtu, hop_limit, rate, plt, traffic_class;
	int retry_count, rnr_retry, cm_timeout, max_cm_retries;
	/* --rdma-cm: interoperate with librdmacm (TCP port space) */
	int rdma_cm;
	const char *pdata;  /* --pdata: user data after the cma_hdr (REQ) / REP data */
	int src_port;       /* --src-port: the cma_hdr's source port */
	int have_src_ip, have_dst_ip;
	uint8_t src_ip[16], dst_ip[16]; /* IPv4-mapped for IPv4 */
} opt = {
	.sid = DEFAULT_SID,
	.port = 1,
	.dlid = -1,
	.slid = -1,
	.count = 1,
	.parallel = 1,
	.msgs = 4,
	.msg_size = 64,
	.wait_ms = 10000,
	/* The CM's timewait is 4.096 µs × 2^(ACK timeout): 1,024 ms on the
	 * default path (--plt 16, ACK delay 16), 2,048 ms one step up. A
	 * default below it would end every connection on "timewait no". */
	.timewait_ms = 3000,
	.mtu = 0,
	.hop_limit = 64,
	.rate = 3, /* 10 Gb/s */
	.plt = 16,
	.retry_count = 5,
	.rnr_retry = 6,
	.cm_timeout = 20,
	.max_cm_retries = 5,
};

#define SERVER_RNR_RETRY 5 /* distinct from the client's so swaps show */

/* ------------------------------------------------------------------------ */
/* Small helpers                                                             */

static uint64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static double now_msf(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1000.0 + (double)ts.tv_nsec / 1e6;
}

static void logv(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void logv(int level, const char *fmt, ...)
{
	va_list ap;
	if (opt.verbose < level)
		return;
	va_start(ap, fmt);
	fprintf(stderr, PROG ": ");
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
}

static void errmsg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void errmsg(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, PROG ": ");
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
}

static void hexdump(const char *what, const void *p, size_t n)
{
	const uint8_t *b = p;
	fprintf(stderr, "%s (%zu bytes):", what, n);
	for (size_t i = 0; i < n; i++)
		fprintf(stderr, "%s%02x", (i % 16) ? " " : "\n  ", b[i]);
	fputc('\n', stderr);
}

static const char *gidstr(const uint8_t *gid, char *buf, size_t len)
{
	if (!inet_ntop(AF_INET6, gid, buf, (socklen_t)len))
		snprintf(buf, len, "?");
	return buf;
}

static int is_v4mapped(const uint8_t *a)
{
	static const uint8_t pfx[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
	return memcmp(a, pfx, 12) == 0;
}

/* an address as the cma_hdr carries it: IPv4-mapped -> dotted quad */
static const char *ipstr(const uint8_t *a, char *buf, size_t len)
{
	if (!inet_ntop(is_v4mapped(a) ? AF_INET : AF_INET6, is_v4mapped(a) ? a + 12 : a, buf,
		       (socklen_t)len))
		snprintf(buf, len, "?");
	return buf;
}

static uint32_t xrand32(void)
{
	static uint64_t s;
	if (!s) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		s = ((uint64_t)ts.tv_nsec << 20) ^ (uint64_t)ts.tv_sec ^ ((uint64_t)getpid() << 40) ^
		    0x9e3779b97f4a7c15ULL;
	}
	s ^= s << 13;
	s ^= s >> 7;
	s ^= s << 17;
	return (uint32_t)(s >> 16);
}

/* Deterministic byte pattern for private data and RC messages. */
static void pattern(uint8_t *dst, size_t n, uint32_t seed)
{
	uint32_t x = seed * 2654435761u + 0x6d2b79f5u;
	for (size_t i = 0; i < n; i++) {
		x ^= x << 13;
		x ^= x >> 17;
		x ^= x << 5;
		dst[i] = (uint8_t)(x >> 11);
	}
}

static void put32(uint8_t *p, uint32_t v)
{
	v = htobe32(v);
	memcpy(p, &v, 4);
}

static uint32_t get32(const uint8_t *p)
{
	uint32_t v;
	memcpy(&v, p, 4);
	return be32toh(v);
}

static const char *event_name(uint32_t ev)
{
	static const char *const names[IB_CM_EVENT_COUNT] = {
		"REQ_ERROR",	 "REQ_RECEIVED",    "REP_ERROR",	 "REP_RECEIVED",
		"RTU_RECEIVED",	 "USER_ESTABLISHED", "DREQ_ERROR",	 "DREQ_RECEIVED",
		"DREP_RECEIVED", "TIMEWAIT_EXIT",   "MRA_RECEIVED",	 "REJ_RECEIVED",
		"LAP_ERROR",	 "LAP_RECEIVED",    "APR_RECEIVED",	 "SIDR_REQ_ERROR",
		"SIDR_REQ_RECEIVED", "SIDR_REP_RECEIVED",
	};
	return ev < IB_CM_EVENT_COUNT ? names[ev] : "UNKNOWN";
}

static const char *cmd_name(uint32_t cmd)
{
	static const char *const names[IB_USER_CM_CMD_COUNT] = {
		"CREATE_ID", "DESTROY_ID", "ATTR_ID",	   "LISTEN",	    "NOTIFY",	     "SEND_REQ",
		"SEND_REP",  "SEND_RTU",   "SEND_DREQ",	   "SEND_DREP",	    "SEND_REJ",	     "SEND_MRA",
		"SEND_LAP",  "SEND_APR",   "SEND_SIDR_REQ", "SEND_SIDR_REP", "GET_EVENT", "INIT_QP_ATTR",
	};
	return cmd < IB_USER_CM_CMD_COUNT ? names[cmd] : "?";
}

/* ------------------------------------------------------------------------ */
/* The ucm device                                                            */

static struct {
	int fd;
	int abi; /* 0 = unknown (libibcm then used the ABI-5 forms) */
	char path[PATH_MAX];
	/* --dump-commands: print instead of write, fake pointers */
	int dump;
	uint64_t fake_ptr;
} dev = { .fd = -1 };

/* Error text of the last failed command, for the per-connection line. */
static char cmd_err[512];

/* Pointer as the ABI carries it. In dump mode: a recognisable fake. */
static uint64_t uptr(const void *p)
{
	if (dev.dump)
		return p ? 0x1100000000000000ULL + ++dev.fake_ptr * 0x10 : 0;
	return (uint64_t)(uintptr_t)p;
}

static const char *sysfs_root(void)
{
	/* libibverbs' ibv_get_sysfs_path(): $SYSFS_PATH (only when not
	 * setuid), trailing slashes removed, else /sys. */
	static char buf[PATH_MAX];
	const char *env = getuid() == geteuid() ? getenv("SYSFS_PATH") : NULL;
	if (!env || !*env)
		return "/sys";
	snprintf(buf, sizeof(buf), "%s", env);
	size_t n = strlen(buf);
	while (n > 1 && buf[n - 1] == '/')
		buf[--n] = '\0';
	return buf;
}

/* ibv_read_sysfs_file-like: read up to cap-1 bytes, strip one trailing \n. */
static int read_small_file(const char *path, char *buf, size_t cap)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t n = read(fd, buf, cap - 1);
	int e = errno;
	close(fd);
	if (n < 0) {
		errno = e;
		return -1;
	}
	buf[n] = '\0';
	if (n > 0 && buf[n - 1] == '\n')
		buf[--n] = '\0';
	return (int)n;
}

/* Returns 0 ok (abi set or left 0 with a warning), -1 version mismatch. */
static int check_abi_version(int quiet_if_missing)
{
	char path[PATH_MAX], val[16];
	snprintf(path, sizeof(path), "%s/class/infiniband_cm/abi_version", sysfs_root());
	if (read_small_file(path, val, 9) < 0) {
		if (!quiet_if_missing)
			errmsg("couldn't read ABI version (%s: %s); using ABI %d commands", path,
			       strerror(errno), UCM_ABI_VERSION);
		dev.abi = 0;
		return 0;
	}
	long v = strtol(val, NULL, 10);
	if (v < UCM_MIN_ABI_VERSION || v > UCM_MAX_ABI_VERSION) {
		errmsg("kernel ABI version %ld doesn't match library version %d (%s)", v,
		       UCM_MAX_ABI_VERSION, path);
		return -1;
	}
	dev.abi = (int)v;
	logv(1, "%s: ABI version %d", path, dev.abi);
	return 0;
}

/* libibcm's ucm_get_dev_index(): hard-coded /sys, first match wins. */
static int find_ucm_index(const char *ibdev, char *found_name, size_t cap)
{
	char path[PATH_MAX], val[128];
	for (int i = 0; i < MAX_UCM_DEVS; i++) {
		snprintf(path, sizeof(path), "/sys/class/infiniband_cm/ucm%d/ibdev", i);
		if (read_small_file(path, val, sizeof(val)) < 0)
			continue;
		if (ibdev ? strcmp(val, ibdev) == 0 : 1) {
			if (found_name)
				snprintf(found_name, cap, "%s", val);
			return i;
		}
	}
	return -1;
}

static int open_ucm(const char *ibdev)
{
	if (opt.ucm_path) {
		/* -D: no discovery; still honour abi_version if it is there. */
		if (check_abi_version(1) < 0)
			return -1;
		snprintf(dev.path, sizeof(dev.path), "%s", opt.ucm_path);
	} else {
		if (check_abi_version(0) < 0)
			return -1;
		char name[128];
		int idx = find_ucm_index(ibdev, name, sizeof(name));
		if (idx < 0) {
			errmsg("no ucm device for %s: no /sys/class/infiniband_cm/ucm<N>/ibdev names "
			       "it (run under `ucmd exec --`, or give the node with -D)",
			       ibdev ? ibdev : "any RDMA device");
			return -1;
		}
		snprintf(dev.path, sizeof(dev.path), "/dev/infiniband/ucm%d", idx);
		logv(1, "%s is ucm%d", name, idx);
	}
	dev.fd = open(dev.path, O_RDWR);
	if (dev.fd < 0) {
		errmsg("open %s: errno %d (%s)", dev.path, errno, strerror(errno));
		return -1;
	}
	if (opt.nonblock) {
		int fl = fcntl(dev.fd, F_GETFL);
		if (fl < 0 || fcntl(dev.fd, F_SETFL, fl | O_NONBLOCK) < 0) {
			errmsg("fcntl O_NONBLOCK on %s: %s", dev.path, strerror(errno));
			return -1;
		}
	}
	logv(1, "opened %s (fd %d, ABI %d%s)", dev.path, dev.fd, dev.abi ? dev.abi : UCM_ABI_VERSION,
	     dev.abi ? "" : " assumed");
	return 0;
}

static volatile sig_atomic_t alarm_fired;
static void on_alarm(int sig)
{
	(void)sig;
	alarm_fired = 1;
}

static long ucm_cmds; /* commands written: test/perf's commands per connection */

/*
 * --cmd-times: each command's write() latency, by command, printed as
 * "ucmclient-cmdtime" lines at exit (docs/perf.md, "What a connection's
 * commands take"); the percentiles are of the first CT_MAX of each command,
 * and n says how many that is. Off, no clock is read.
 */
#define CT_CMDS 32
#define CT_MAX 8192
static uint32_t ct_us[CT_CMDS][CT_MAX];
static int ct_n[CT_CMDS];

static int ct_cmp(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	return x < y ? -1 : x > y;
}

static void ct_record(uint32_t cmd, const struct timespec *t0, const struct timespec *t1)
{
	if (cmd >= CT_CMDS || ct_n[cmd] >= CT_MAX)
		return;
	ct_us[cmd][ct_n[cmd]++] =
		(uint32_t)((t1->tv_sec - t0->tv_sec) * 1000000 + (t1->tv_nsec - t0->tv_nsec) / 1000);
}

static void ct_report(const char *role)
{
	for (uint32_t c = 0; c < CT_CMDS; c++) {
		int n = ct_n[c];
		if (n == 0)
			continue;
		qsort(ct_us[c], n, sizeof(uint32_t), ct_cmp);
		printf("ucmclient-cmdtime role=%s cmd=%s n=%d p10_us=%u p50_us=%u p90_us=%u\n", role,
		       cmd_name(c), n, ct_us[c][n / 10], ct_us[c][n / 2], ct_us[c][n * 9 / 10]);
	}
}

/*
 * One command: header + struct in a single write(), like libibcm.
 * Returns 0, or -1 with errno and cmd_err set. A short positive count is
 * ENODATA (libibcm's convention).
 */
static int ucm_write(uint32_t cmd, const void *body, uint16_t in, uint16_t out, int timeout_ms)
{
	uint8_t buf[sizeof(struct ib_ucm_cmd_hdr) + 128];
	struct ib_ucm_cmd_hdr hdr = { .cmd = cmd, .in = in, .out = out };
	size_t size = sizeof(hdr) + in;

	memcpy(buf, &hdr, sizeof(hdr));
	memcpy(buf + sizeof(hdr), body, in);
	dev.fake_ptr = 0;

	if (dev.dump) {
		printf("%s %zu:", cmd_name(cmd), size);
		for (size_t i = 0; i < size; i++)
			printf(" %02x", buf[i]);
		printf("\n");
		return 0;
	}
	if (opt.verbose >= 3)
		hexdump(cmd_name(cmd), buf, size);

	/* Every command is bounded (a daemon that never answers would otherwise
	 * hang us); GET_EVENT passes its own. EINTR is reported as a timeout. */
	if (timeout_ms == 0 && !(cmd == IB_USER_CM_CMD_EVENT && opt.nonblock))
		timeout_ms = opt.wait_ms;
	if (opt.libibcm)
		timeout_ms = 0; /* as libibcm: the write blocks; -T bounds the run */
	struct itimerval itv = { 0 };
	if (timeout_ms > 0) {
		alarm_fired = 0;
		itv.it_value.tv_sec = timeout_ms / 1000;
		itv.it_value.tv_usec = (timeout_ms % 1000) * 1000;
		setitimer(ITIMER_REAL, &itv, NULL);
	}
	ucm_cmds++;
	struct timespec t0, t1;
	if (opt.cmd_times)
		clock_gettime(CLOCK_MONOTONIC, &t0);
	ssize_t n = write(dev.fd, buf, size);
	int e = errno;
	if (opt.cmd_times) {
		clock_gettime(CLOCK_MONOTONIC, &t1);
		ct_record(cmd, &t0, &t1);
	}
	if (timeout_ms > 0) {
		struct itimerval zero = { 0 };
		setitimer(ITIMER_REAL, &zero, NULL);
	}
	if (n == (ssize_t)size)
		return 0;
	if (n >= 0) {
		snprintf(cmd_err, sizeof(cmd_err),
			 "%s: write(%zu bytes) returned %zd: errno %d (%s)", cmd_name(cmd), size, n,
			 ENODATA, strerror(ENODATA));
		errno = ENODATA;
		return -1;
	}
	snprintf(cmd_err, sizeof(cmd_err), "%s: write(%zu bytes) failed: errno %d (%s)%s",
		 cmd_name(cmd), size, e, strerror(e),
		 (e == EINTR && alarm_fired) ? " [timed out]" : "");
	errno = e;
	return -1;
}

static int resp_unwritten(const void *p, size_t n, const char *cmd)
{
	const uint8_t *b = p;
	if (dev.dump)
		return 0;
	for (size_t i = 0; i < n; i++)
		if (b[i] != CANARY)
			return 0;
	snprintf(cmd_err, sizeof(cmd_err),
		 "%s: write succeeded but the device did not write the %zu-byte response", cmd, n);
	errno = EPROTO;
	return 1;
}

static int ucm_create_id(uint64_t uid, uint32_t *id)
{
	struct ib_ucm_create_id_resp resp;
	struct ib_ucm_create_id cmd = { .uid = uid, .response = uptr(&resp) };
	memset(&resp, CANARY, sizeof(resp));
	if (ucm_write(IB_USER_CM_CMD_CREATE_ID, &cmd, sizeof(cmd), sizeof(resp), 0))
		return -1;
	if (resp_unwritten(&resp, sizeof(resp), "CREATE_ID"))
		return -1;
	*id = resp.id;
	return 0;
}

static int ucm_destroy_id(uint32_t id, uint32_t *events_reported)
{
	struct ib_ucm_destroy_id_resp resp;
	struct ib_ucm_destroy_id cmd = { .response = uptr(&resp), .id = id };
	memset(&resp, CANARY, sizeof(resp));
	if (ucm_write(IB_USER_CM_CMD_DESTROY_ID, &cmd, sizeof(cmd), sizeof(resp), 0))
		return -1;
	if (resp_unwritten(&resp, sizeof(resp), "DESTROY_ID"))
		return -1;
	*events_reported = resp.events_reported;
	return 0;
}

static int ucm_attr_id(uint32_t id, struct ib_ucm_attr_id_resp *out)
{
	struct ib_ucm_attr_id_resp resp;
	struct ib_ucm_attr_id cmd = { .response = uptr(&resp), .id = id };
	memset(&resp, CANARY, sizeof(resp));
	if (ucm_write(IB_USER_CM_CMD_ATTR_ID, &cmd, sizeof(cmd), sizeof(resp), 0))
		return -1;
	if (resp_unwritten(&resp, sizeof(resp), "ATTR_ID"))
		return -1;
	*out = resp;
	return 0;
}

static int ucm_listen(uint32_t id, uint64_t sid, uint64_t mask)
{
	struct ib_ucm_listen cmd = { .service_id = htobe64(sid), .service_mask = htobe64(mask), .id = id };
	return ucm_write(IB_USER_CM_CMD_LISTEN, &cmd, sizeof(cmd), 0, 0);
}

static int ucm_notify(uint32_t id, uint32_t event)
{
	if (dev.abi == 4) {
		/* ABI 4: ESTABLISH, COMM_EST only (libibcm refused the rest). */
		struct ib_ucm_establish cmd = { .id = id };
		if (event != UCM_EVENT_COMM_EST) {
			errno = EINVAL;
			snprintf(cmd_err, sizeof(cmd_err), "NOTIFY: event %u needs ABI 5", event);
			return -1;
		}
		return ucm_write(IB_USER_CM_CMD_NOTIFY, &cmd, sizeof(cmd), 0, 0);
	}
	struct ib_ucm_notify cmd = { .id = id, .event = event };
	return ucm_write(IB_USER_CM_CMD_NOTIFY, &cmd, sizeof(cmd), 0, 0);
}

static int ucm_private_data(uint32_t cmdno, uint32_t id, const void *data, uint8_t len)
{
	/* libibcm passed data only when both pointer and length were given */
	struct ib_ucm_private_data cmd = { .id = id };
	if (data && len) {
		cmd.data = uptr(data);
		cmd.len = len;
	}
	return ucm_write(cmdno, &cmd, sizeof(cmd), 0, 0);
}

static int ucm_init_qp_attr(uint32_t id, uint32_t qp_state, struct ucm_uverbs_qp_attr *out)
{
	struct ib_ucm_init_qp_attr cmd = { .response = uptr(out), .id = id, .qp_state = qp_state };
	memset(out, CANARY, sizeof(*out));
	if (ucm_write(IB_USER_CM_CMD_INIT_QP_ATTR, &cmd, sizeof(cmd), sizeof(*out), 0))
		return -1;
	if (resp_unwritten(out, sizeof(*out), "INIT_QP_ATTR"))
		return -1;
	return 0;
}

/*
 * GET_EVENT with libibcm's 255-byte buffers. Returns 1 with an event, 0 when
 * none is ready (O_NONBLOCK: EAGAIN), -1 on error.
 */
static int ucm_get_event(struct ib_ucm_event_resp *resp, uint8_t *data, uint8_t *info, int timeout_ms)
{
	struct ib_ucm_event_get cmd = {
		.response = uptr(resp),
		.data = uptr(data),
		.info = uptr(info),
		.data_len = EVENT_BUF,
		.info_len = EVENT_BUF,
	};
	memset(resp, CANARY, sizeof(*resp));
	memset(data, CANARY, EVENT_BUF);
	memset(info, CANARY, EVENT_BUF);
	if (ucm_write(IB_USER_CM_CMD_EVENT, &cmd, sizeof(cmd), sizeof(*resp), opt.nonblock ? 0 : timeout_ms)) {
		if (errno == EAGAIN && opt.nonblock)
			return 0;
		return -1;
	}
	if (resp_unwritten(resp, sizeof(*resp), "GET_EVENT"))
		return -1;
	return 1;
}

/* ------------------------------------------------------------------------ */
/* Wire image dump (--dump-commands): each command once, fixed values        */

static int dump_commands(void)
{
	dev.dump = 1;
	uint32_t id;
	uint32_t er;
	struct ib_ucm_attr_id_resp ar;
	struct ucm_uverbs_qp_attr qa;
	struct ib_ucm_event_resp ev;
	uint8_t d[EVENT_BUF], in[EVENT_BUF];
	uint8_t pd[4] = { 1, 2, 3, 4 };
	static struct ucm_user_path_rec path;

	ucm_create_id(0x1122334455667788ULL, &id);
	ucm_destroy_id(7, &er);
	ucm_attr_id(7, &ar);
	ucm_listen(7, 0x1000, 0);
	ucm_notify(7, UCM_EVENT_COMM_EST);
	dev.abi = 4;
	ucm_notify(7, UCM_EVENT_COMM_EST);
	dev.abi = 5;
	uint64_t p_data = uptr(pd), p_path = uptr(&path); /* fixed order */
	struct ib_ucm_req req = {
		.id = 7, .qpn = 0x123456, .qp_type = UCM_QPT_RC, .psn = 0xabcdef,
		.sid = htobe64(0x1000), .data = p_data, .primary_path = p_path, .len = 4,
		.responder_resources = 4, .initiator_depth = 2, .remote_cm_response_timeout = 20,
		.local_cm_response_timeout = 20, .retry_count = 5, .rnr_retry_count = 6,
		.max_cm_retries = 5,
	};
	ucm_write(IB_USER_CM_CMD_SEND_REQ, &req, sizeof(req), 0, 0);
	struct ib_ucm_rep rep = {
		.uid = 0x8877665544332211ULL, .data = uptr(pd), .id = 8, .qpn = 0x654321, .psn = 0x111111,
		.len = 4, .responder_resources = 2, .initiator_depth = 4, .target_ack_delay = 20,
		.rnr_retry_count = 5,
	};
	ucm_write(IB_USER_CM_CMD_SEND_REP, &rep, sizeof(rep), 0, 0);
	ucm_private_data(IB_USER_CM_CMD_SEND_RTU, 7, pd, 4);
	ucm_private_data(IB_USER_CM_CMD_SEND_DREQ, 7, pd, 4);
	ucm_private_data(IB_USER_CM_CMD_SEND_DREP, 8, NULL, 0);
	ucm_get_event(&ev, d, in, 0);
	ucm_init_qp_attr(7, UCM_QPS_RTR, &qa);
	return 0;
}

/* ------------------------------------------------------------------------ */
/* Verbs                                                                     */

static struct {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_comp_channel *chan;
	struct ibv_device_attr dattr;
	struct ibv_port_attr pattr;
	char name[IBV_SYSFS_NAME_MAX];
} vb;

#ifdef UCMCLIENT_NO_VERBS
static int verbs_open(void)
{
	errmsg("built without libibverbs: only --no-verbs runs");
	return -1;
}
#else
static int verbs_open(void)
{
	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	struct ibv_device *d = NULL;
	if (!list || n == 0) {
		errmsg("no RDMA devices found by libibverbs%s", opt.devname ? "" : " (try --no-verbs)");
		if (list)
			ibv_free_device_list(list);
		return -1;
	}
	for (int i = 0; i < n; i++)
		if (!opt.devname || strcmp(ibv_get_device_name(list[i]), opt.devname) == 0) {
			d = list[i];
			break;
		}
	if (!d) {
		errmsg("RDMA device %s not found", opt.devname);
		ibv_free_device_list(list);
		return -1;
	}
	snprintf(vb.name, sizeof(vb.name), "%s", ibv_get_device_name(d));
	vb.ctx = ibv_open_device(d);
	ibv_free_device_list(list);
	if (!vb.ctx) {
		errmsg("ibv_open_device(%s): %s", vb.name, strerror(errno));
		return -1;
	}
	if (ibv_query_device(vb.ctx, &vb.dattr) ||
	    ibv_query_port(vb.ctx, (uint8_t)opt.port, &vb.pattr)) {
		errmsg("ibv_query_device/port(%s:%d): %s", vb.name, opt.port, strerror(errno));
		return -1;
	}
	vb.pd = ibv_alloc_pd(vb.ctx);
	vb.chan = ibv_create_comp_channel(vb.ctx);
	if (!vb.pd || !vb.chan) {
		errmsg("ibv_alloc_pd/ibv_create_comp_channel: %s", strerror(errno));
		return -1;
	}
	int fl = fcntl(vb.chan->fd, F_GETFL);
	if (fl < 0 || fcntl(vb.chan->fd, F_SETFL, fl | O_NONBLOCK) < 0) {
		errmsg("fcntl completion channel: %s", strerror(errno));
		return -1;
	}
	if (opt.client && !opt.have_sgid && opt.rdma_cm && !opt.have_gid_index) {
		/* RoCE: the first local GID of the remote one's kind (IPv4-mapped
		 * or not), as rdma_cm picks it from the addresses */
		for (int i = 0; i < vb.pattr.gid_tbl_len && i < 256; i++) {
			union ibv_gid g;
			static const uint8_t zero[16];
			if (ibv_query_gid(vb.ctx, (uint8_t)opt.port, i, &g) || !memcmp(g.raw, zero, 16))
				continue;
			if (is_v4mapped(g.raw) == is_v4mapped(opt.rgid)) {
				opt.gid_index = i;
				break;
			}
		}
	}
	if (opt.client && !opt.have_sgid) {
		union ibv_gid g;
		if (ibv_query_gid(vb.ctx, (uint8_t)opt.port, opt.gid_index, &g)) {
			errmsg("ibv_query_gid(%s port %d index %d): %s", vb.name, opt.port, opt.gid_index,
			       strerror(errno));
			return -1;
		}
		static const uint8_t zero[16];
		if (!memcmp(g.raw, zero, 16)) {
			errmsg("%s port %d GID index %d is empty", vb.name, opt.port, opt.gid_index);
			return -1;
		}
		memcpy(opt.sgid, g.raw, 16);
		opt.have_sgid = 1;
	}
	char gs[64];
	logv(1, "verbs device %s port %d: state %d, active_mtu %d, link_layer %s, lid %u, sgid %s",
	     vb.name, opt.port, vb.pattr.state, vb.pattr.active_mtu,
	     vb.pattr.link_layer == IBV_LINK_LAYER_ETHERNET ? "Ethernet" : "InfiniBand",
	     vb.pattr.lid, opt.have_sgid ? gidstr(opt.sgid, gs, sizeof(gs)) : "-");
	return 0;
}

/* ib_uverbs_ah_attr -> ibv_ah_attr, field by field (no byte swapping). */
static void ah_from_ucm(struct ibv_ah_attr *d, const struct ucm_uverbs_ah_attr *s)
{
	memcpy(d->grh.dgid.raw, s->grh.dgid, 16);
	d->grh.flow_label = s->grh.flow_label;
	d->grh.sgid_index = s->grh.sgid_index;
	d->grh.hop_limit = s->grh.hop_limit;
	d->grh.traffic_class = s->grh.traffic_class;
	d->dlid = s->dlid;
	d->sl = s->sl;
	d->src_path_bits = s->src_path_bits;
	d->static_rate = s->static_rate;
	d->is_global = s->is_global;
	d->port_num = s->port_num;
}

/* What libibcm's ib_cm_init_qp_attr did with ibv_copy_qp_attr_from_kern:
 * every field except qp_state, which stays as the caller asked. */
static void qp_attr_from_ucm(struct ibv_qp_attr *d, const struct ucm_uverbs_qp_attr *s)
{
	d->cur_qp_state = (enum ibv_qp_state)s->cur_qp_state;
	d->path_mtu = (enum ibv_mtu)s->path_mtu;
	d->path_mig_state = (enum ibv_mig_state)s->path_mig_state;
	d->qkey = s->qkey;
	d->rq_psn = s->rq_psn;
	d->sq_psn = s->sq_psn;
	d->dest_qp_num = s->dest_qp_num;
	d->qp_access_flags = (int)s->qp_access_flags;
	d->cap.max_send_wr = s->max_send_wr;
	d->cap.max_recv_wr = s->max_recv_wr;
	d->cap.max_send_sge = s->max_send_sge;
	d->cap.max_recv_sge = s->max_recv_sge;
	d->cap.max_inline_data = s->max_inline_data;
	ah_from_ucm(&d->ah_attr, &s->ah_attr);
	ah_from_ucm(&d->alt_ah_attr, &s->alt_ah_attr);
	d->pkey_index = s->pkey_index;
	d->alt_pkey_index = s->alt_pkey_index;
	d->en_sqd_async_notify = s->en_sqd_async_notify;
	d->sq_draining = s->sq_draining;
	d->max_rd_atomic = s->max_rd_atomic;
	d->max_dest_rd_atomic = s->max_dest_rd_atomic;
	d->min_rnr_timer = s->min_rnr_timer;
	d->port_num = s->port_num;
	d->timeout = s->timeout;
	d->retry_cnt = s->retry_cnt;
	d->rnr_retry = s->rnr_retry;
	d->alt_port_num = s->alt_port_num;
	d->alt_timeout = s->alt_timeout;
}
#endif /* UCMCLIENT_NO_VERBS */

/* ------------------------------------------------------------------------ */
/* Per-id objects                                                            */

enum role { ROLE_LISTENER, ROLE_CLIENT, ROLE_SERVER };

enum cstate {
	/* client */
	C_REQ_SENT,   /* waiting REP (MRA tolerated) */
	C_DATA,	      /* RTU sent (or data-before-rtu), data moving */
	C_HOLD,	      /* --hold, --burst: connected and done, waiting before DREQ */
	C_DREQ_SENT,  /* waiting DREP */
	/* server */
	S_REP_SENT,   /* waiting RTU / data (-> NOTIFY) */
	S_NOTIFIED,   /* NOTIFY(COMM_EST) done, waiting USER_ESTABLISHED (or RTU on EISCONN) */
	S_DATA,	      /* established, data moving; DREP once DREQ came and data finished */
	/* both */
	X_TIMEWAIT,   /* waiting TIMEWAIT_EXIT (optional, -w) */
	X_DONE,
};

/* Private data magic numbers. */
#define MAGIC_REQ 0x55434d71u  /* "UCMq" */
#define MAGIC_REP 0x55434d70u  /* "UCMp" */
#define MAGIC_RTU 0x55434d72u  /* "UCMr" */
#define MAGIC_DREQ 0x55434d64u /* "UCMd" */
#define MAGIC_DREP 0x55434d65u /* "UCMe" */
#define HELLO_LEN 80
#define SHORT_PD_LEN 8

struct conn {
	struct conn *next;
	enum role role;
	int num;	   /* connection number (client: 0..total-1; server: accept order) */
	uint32_t id;
	int have_id;
	unsigned events;   /* events GET_EVENT delivered for this id */
	enum cstate st;
	uint64_t deadline; /* ms, monotonic */
	const char *waiting; /* what we wait for, for timeout messages */
	double t0;

	/* negotiated / exchanged */
	uint32_t nonce;
	uint32_t qpn, psn;
	uint32_t rqpn, rpsn;
	int msgs, msg_size;
	uint8_t rr, idepth; /* our responder_resources / initiator_depth */
	uint8_t peer_rr, peer_id;
	uint8_t peer_retry, peer_rnr; /* server: what the client's REQ asked for */
	int peer_verbs, peer_dbr;
	const char *est_by; /* "RTU", "COMM_EST", "DREQ" */
	int timewait_seen;
	int dreq_rcvd;

	/* verbs */
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	uint8_t *buf;
	int sent_posted, send_done, recvd;
	int rts;

	int failed;
	char err[768];
	const char *note; /* printed on the result line */
	char pdnote[160]; /* --rdma-cm: the peer's private data, for the note */
};

static struct conn *conns; /* live objects, including the listener */
static struct conn *listener;
static int any_failure;
static volatile sig_atomic_t stop_requested;

static void on_stop(int sig)
{
	(void)sig;
	stop_requested = 1;
}

static void set_wait(struct conn *c, const char *what)
{
	c->waiting = what;
	c->deadline = now_ms() + (uint64_t)opt.wait_ms;
}

static void conn_fail(struct conn *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void conn_fail(struct conn *c, const char *fmt, ...)
{
	if (c->failed)
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(c->err, sizeof(c->err), fmt, ap);
	va_end(ap);
	c->failed = 1;
	c->st = X_DONE;
}

static void conn_fail_cmd(struct conn *c)
{
	conn_fail(c, "%s", cmd_err);
}

static void link_conn(struct conn *c)
{
	c->next = conns;
	conns = c;
}

static void unlink_conn(struct conn *c)
{
	for (struct conn **pp = &conns; *pp; pp = &(*pp)->next)
		if (*pp == c) {
			*pp = c->next;
			return;
		}
}

static struct conn *find_by_uid(uint64_t uid)
{
	for (struct conn *c = conns; c; c = c->next)
		if ((uint64_t)(uintptr_t)c == uid)
			return c;
	return NULL;
}

static struct conn *find_by_id(uint32_t id)
{
	for (struct conn *c = conns; c; c = c->next)
		if (c->have_id && c->id == id)
			return c;
	return NULL;
}

/* verbs only: unused when built without libibverbs */
#define VERBS_ONLY __attribute__((unused))

static VERBS_ONLY uint8_t *recv_buf(struct conn *c, int i)
{
	return c->buf + (size_t)i * (size_t)c->msg_size;
}

static VERBS_ONLY uint8_t *send_buf(struct conn *c, int i)
{
	return c->buf + ((size_t)c->msgs + (size_t)i) * (size_t)c->msg_size;
}

/* A made-up QPN for a connection without a QP, unique in this process:
 * consecutive odd numbers from a random start. Drawn at random for each
 * connection, a QPN now and then matched that of a connection the peer's
 * CM still held in timewait, and that CM rejected the REQ as a stale
 * connection (REJ 10), as it must: a make perf run of 2026-12-06 failed
 * so, one connection in 200 at 50 in flight. */
static uint32_t made_up_qpn(void)
{
	static uint32_t next;
	if (!next)
		next = xrand32() | 1;
	next += 2;
	return (next & 0xffffff) | 1;
}

static int setup_qp(struct conn *c)
{
	if (opt.no_verbs) {
		c->qpn = made_up_qpn();
		return 0;
	}
#ifdef UCMCLIENT_NO_VERBS
	(void)c;
	return -1;
#else
	/* -M 0: a QP that moves no data still needs a buffer to register */
	size_t len = (size_t)(c->msgs ? c->msgs : 1) * (size_t)c->msg_size * 2;
	c->buf = calloc(1, len);
	c->cq = ibv_create_cq(vb.ctx, c->msgs * 2 + 2, c, vb.chan, 0);
	if (!c->buf || !c->cq) {
		conn_fail(c, "ibv_create_cq: errno %d (%s)", errno, strerror(errno));
		return -1;
	}
	if (ibv_req_notify_cq(c->cq, 0)) {
		conn_fail(c, "ibv_req_notify_cq: errno %d (%s)", errno, strerror(errno));
		return -1;
	}
	c->mr = ibv_reg_mr(vb.pd, c->buf, len, IBV_ACCESS_LOCAL_WRITE);
	if (!c->mr) {
		conn_fail(c, "ibv_reg_mr: errno %d (%s)", errno, strerror(errno));
		return -1;
	}
	struct ibv_qp_init_attr ia = {
		.send_cq = c->cq,
		.recv_cq = c->cq,
		.qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = (uint32_t)(c->msgs ? c->msgs : 1),
			 .max_recv_wr = (uint32_t)(c->msgs ? c->msgs : 1),
			 .max_send_sge = 1, .max_recv_sge = 1 },
		.sq_sig_all = 1,
	};
	c->qp = ibv_create_qp(vb.pd, &ia);
	if (!c->qp) {
		conn_fail(c, "ibv_create_qp: errno %d (%s)", errno, strerror(errno));
		return -1;
	}
	c->qpn = c->qp->qp_num;
	return 0;
#endif
}

static void teardown_qp(struct conn *c)
{
#ifndef UCMCLIENT_NO_VERBS
	if (c->qp)
		ibv_destroy_qp(c->qp);
	if (c->mr)
		ibv_dereg_mr(c->mr);
	if (c->cq)
		ibv_destroy_cq(c->cq);
#endif
	free(c->buf);
	c->qp = NULL;
	c->mr = NULL;
	c->cq = NULL;
	c->buf = NULL;
}

/* apply_qp_state flags */
#define QPA_PRE_REP 1	 /* passive RTR before SEND_REP: the CM cannot know our
			  * REP PSN yet (the kernel sets it in ib_send_cm_rep), so
			  * rq_psn is ours to fill in, as cmpost and IPoIB did */
#define QPA_CHECK_ONLY 2 /* query and check, don't modify the QP */
#define QPA_MAY_BE_GONE 4 /* no-verbs, after SEND_REP: the client may have sent
			   * RTU and DREQ already; EINVAL (DREQ_RCVD) is noted */

/* INIT_QP_ATTR for one state, checks, and (verbs) ibv_modify_qp with exactly
 * the returned mask. */
static int apply_qp_state(struct conn *c, uint32_t state, int flags)
{
	static const char *const sn[] = { "RESET", "INIT", "RTR", "RTS" };
	struct ucm_uverbs_qp_attr ka;
	/* --libibcm does what an application does: without a QP it asks for
	 * no QP attributes, and it never makes the check-only calls */
	if (opt.libibcm && (opt.no_verbs || !c->peer_verbs || (flags & QPA_CHECK_ONLY)))
		return 0;
	if (ucm_init_qp_attr(c->id, state, &ka)) {
		if ((flags & QPA_MAY_BE_GONE) && errno == EINVAL) {
			c->note = "post-REP RTR check skipped (EINVAL: DREQ already in)";
			logv(1, "conn %d: %s", c->num, c->note);
			return 0;
		}
		conn_fail(c, "%s (qp_state %s)", cmd_err, sn[state]);
		return -1;
	}
	uint32_t m = ka.qp_attr_mask;
	uint32_t need = 0;
	switch (state) {
	case UCM_QPS_INIT:
		need = UCM_QP_STATE | UCM_QP_ACCESS_FLAGS | UCM_QP_PKEY_INDEX | UCM_QP_PORT;
		break;
	case UCM_QPS_RTR:
		need = UCM_QP_STATE | UCM_QP_AV | UCM_QP_PATH_MTU | UCM_QP_DEST_QPN | UCM_QP_RQ_PSN |
		       UCM_QP_MAX_DEST_RD_ATOMIC | UCM_QP_MIN_RNR_TIMER;
		break;
	case UCM_QPS_RTS:
		need = UCM_QP_STATE | UCM_QP_SQ_PSN | UCM_QP_TIMEOUT | UCM_QP_RETRY_CNT |
		       UCM_QP_RNR_RETRY | UCM_QP_MAX_QP_RD_ATOMIC;
		break;
	}
	logv(2, "conn %d id %u INIT_QP_ATTR %s: mask 0x%x dest_qpn 0x%x rq_psn 0x%x sq_psn 0x%x "
		"mtu %u port %u retry %u rnr %u timeout %u is_global %u sgid_index %u",
	     c->num, c->id, sn[state], m, ka.dest_qp_num, ka.rq_psn, ka.sq_psn, ka.path_mtu,
	     ka.port_num, ka.retry_cnt, ka.rnr_retry, ka.timeout, ka.ah_attr.is_global,
	     ka.ah_attr.grh.sgid_index);
	if (m == 0) {
		conn_fail(c, "INIT_QP_ATTR %s: qp_attr_mask is 0", sn[state]);
		return -1;
	}
	if ((m & need) != need) {
		conn_fail(c, "INIT_QP_ATTR %s: qp_attr_mask 0x%x lacks 0x%x", sn[state], m, need & ~m);
		return -1;
	}
	if (m & ~UCM_QP_ALL_KNOWN) {
		conn_fail(c, "INIT_QP_ATTR %s: qp_attr_mask 0x%x has unknown bits", sn[state], m);
		return -1;
	}
	if (!opt.lax) {
		/* retry_cnt: the active side's choice on both ends; rnr_retry:
		 * each end uses the value its peer chose (ib-cm.md §7). */
		uint32_t want_retry = c->role == ROLE_CLIENT ? (uint32_t)opt.retry_count : c->peer_retry;
		uint32_t want_rnr = c->role == ROLE_CLIENT && !opt.rdma_cm ? SERVER_RNR_RETRY : c->peer_rnr;
		const char *bad = NULL;
		uint32_t got = 0, want = 0;
		if (state == UCM_QPS_RTR && ka.dest_qp_num != c->rqpn)
			bad = "dest_qp_num", got = ka.dest_qp_num, want = c->rqpn;
		else if (state == UCM_QPS_RTR && !(flags & QPA_PRE_REP) && ka.rq_psn != c->psn)
			bad = "rq_psn", got = ka.rq_psn, want = c->psn;
		else if (state == UCM_QPS_RTR && (ka.path_mtu < 1 || ka.path_mtu > 5))
			bad = "path_mtu", got = ka.path_mtu, want = 0;
		else if (state == UCM_QPS_RTS && ka.sq_psn != c->rpsn)
			bad = "sq_psn", got = ka.sq_psn, want = c->rpsn;
		else if (state == UCM_QPS_RTS && ka.retry_cnt != want_retry)
			bad = "retry_cnt", got = ka.retry_cnt, want = want_retry;
		else if (state == UCM_QPS_RTS && ka.rnr_retry != want_rnr)
			bad = "rnr_retry", got = ka.rnr_retry, want = want_rnr;
		else if (state == UCM_QPS_INIT && !opt.no_verbs && ka.port_num != (uint32_t)opt.port &&
			 c->role == ROLE_CLIENT)
			bad = "port_num", got = ka.port_num, want = (uint32_t)opt.port;
		if (bad) {
			conn_fail(c, "INIT_QP_ATTR %s: %s = 0x%x, expected 0x%x", sn[state], bad, got, want);
			return -1;
		}
	}
	if (opt.no_verbs || (flags & QPA_CHECK_ONLY))
		return 0;
#ifdef UCMCLIENT_NO_VERBS
	(void)c;
	return -1;
#else
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof(a));
	a.qp_state = (enum ibv_qp_state)state;
	qp_attr_from_ucm(&a, &ka);
	if (flags & QPA_PRE_REP)
		a.rq_psn = c->psn;
	int r = ibv_modify_qp(c->qp, &a, (int)m);
	if (r) {
		conn_fail(c, "ibv_modify_qp(%s, mask 0x%x): errno %d (%s)", sn[state], m, r, strerror(r));
		return -1;
	}
	if (state == UCM_QPS_RTS)
		c->rts = 1;
	return 0;
#endif
}

static int post_recvs(struct conn *c)
{
	if (opt.no_verbs)
		return 0;
#ifdef UCMCLIENT_NO_VERBS
	(void)c;
	return -1;
#else
	for (int i = 0; i < c->msgs; i++) {
		struct ibv_sge sge = { .addr = (uintptr_t)recv_buf(c, i), .length = (uint32_t)c->msg_size,
				       .lkey = c->mr->lkey };
		struct ibv_recv_wr wr = { .wr_id = (uint64_t)i << 1, .sg_list = &sge, .num_sge = 1 }, *bad;
		int r = ibv_post_recv(c->qp, &wr, &bad);
		if (r) {
			conn_fail(c, "ibv_post_recv: errno %d (%s)", r, strerror(r));
			return -1;
		}
	}
	return 0;
#endif
}

static VERBS_ONLY void fill_msg(struct conn *c, uint8_t *p, int dir, int seq)
{
	if (opt.rdma_cm) {
		/* cmpeer's messages (test/interop/cmpeer): dir 0 = active -> passive */
		for (int j = 0; j < c->msg_size; j++)
			p[j] = (uint8_t)(dir * 0x80 + seq * 31 + j * 7 + 1);
		return;
	}
	put32(p, (uint32_t)seq);
	pattern(p + 4, (size_t)c->msg_size - 4, c->nonce ^ ((uint32_t)dir << 31) ^ ((uint32_t)seq * 7919u));
}

static int post_sends(struct conn *c)
{
	if (opt.no_verbs)
		return 0;
#ifdef UCMCLIENT_NO_VERBS
	(void)c;
	return -1;
#else
	int dir = c->role == ROLE_CLIENT ? 0 : 1;
	for (int i = 0; i < c->msgs; i++) {
		fill_msg(c, send_buf(c, i), dir, i);
		struct ibv_sge sge = { .addr = (uintptr_t)send_buf(c, i), .length = (uint32_t)c->msg_size,
				       .lkey = c->mr->lkey };
		struct ibv_send_wr wr = { .wr_id = ((uint64_t)i << 1) | 1, .sg_list = &sge, .num_sge = 1,
					  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED },
				   *bad;
		int r = ibv_post_send(c->qp, &wr, &bad);
		if (r) {
			conn_fail(c, "ibv_post_send: errno %d (%s)", r, strerror(r));
			return -1;
		}
	}
	c->sent_posted = c->msgs;
	return 0;
#endif
}

static int data_done(const struct conn *c)
{
	if (opt.no_verbs || !c->peer_verbs)
		return 1;
	return c->recvd == c->msgs && c->send_done == c->msgs;
}

/* ------------------------------------------------------------------------ */
/* Private data                                                              */

/* Expected bytes, then zeros up to the message's private-data size, then our
 * canary: GET_EVENT must deliver exactly `area` bytes. */
static int check_pdata(struct conn *c, const char *what, const uint8_t *data, uint32_t present,
		       const uint8_t *expect, size_t elen, size_t area)
{
	if (!(present & IB_UCM_PRES_DATA)) {
		conn_fail(c, "%s: present 0x%x lacks DATA", what, present);
		return -1;
	}
	if (expect && memcmp(data, expect, elen)) {
		conn_fail(c, "%s: private data differs from what the peer sent", what);
		return -1;
	}
	for (size_t i = elen; i < area; i++)
		if (data[i] != 0) {
			conn_fail(c, "%s: private data byte %zu is 0x%02x, expected 0 (padding)", what, i,
				  data[i]);
			return -1;
		}
	for (size_t i = area; i < EVENT_BUF; i++)
		if (data[i] != CANARY) {
			conn_fail(c, "%s: data buffer written beyond %zu bytes (byte %zu)", what, area, i);
			return -1;
		}
	return 0;
}

static void short_pd(uint8_t *p, uint32_t magic, uint32_t nonce)
{
	put32(p, magic);
	put32(p + 4, nonce);
}

static void make_hello(struct conn *c, uint8_t *h)
{
	memset(h, 0, HELLO_LEN);
	put32(h, MAGIC_REQ);
	put32(h + 4, c->nonce);
	put32(h + 8, (uint32_t)c->num);
	put32(h + 12, c->qpn);
	put32(h + 16, c->psn);
	put32(h + 20, ((uint32_t)c->msgs << 16) | (uint32_t)c->msg_size);
	h[24] = c->rr;
	h[25] = c->idepth;
	h[26] = (uint8_t)((opt.no_verbs ? 0 : 1) | (opt.data_before_rtu ? 2 : 0));
	h[27] = (uint8_t)opt.mtu;
	memcpy(h + 28, opt.sgid, 16);
	memcpy(h + 44, opt.rgid, 16);
	h[60] = (uint8_t)opt.retry_count;
	h[61] = (uint8_t)opt.rnr_retry;
	pattern(h + 62, HELLO_LEN - 62, c->nonce);
}

static void make_rep_pd(struct conn *c, uint8_t *h)
{
	memset(h, 0, HELLO_LEN);
	put32(h, MAGIC_REP);
	put32(h + 4, c->nonce);
	put32(h + 8, (uint32_t)c->num);
	put32(h + 12, c->qpn);
	put32(h + 16, c->psn);
	h[24] = c->rr;
	h[25] = c->idepth;
	h[26] = opt.no_verbs ? 0 : 1;
	pattern(h + 60, HELLO_LEN - 60, ~c->nonce);
}

/* --rdma-cm: rdma_cm's private-data header for the TCP port space (kernel
 * cma.c, struct cma_hdr): cma_version 0, ip_version << 4, the source port
 * (big endian), then the source and destination addresses, 16 bytes each
 * (IPv4 in the last 4). The destination port is in the service id. */
#define CMA_HDR_LEN 36

static size_t make_cma_req_pd(uint8_t *h)
{
	const uint8_t *src = opt.have_src_ip ? opt.src_ip : opt.sgid;
	const uint8_t *dst = opt.have_dst_ip ? opt.dst_ip : opt.rgid;
	int v4 = is_v4mapped(src) && is_v4mapped(dst);
	size_t ulen = opt.pdata ? strlen(opt.pdata) : 0;
	memset(h, 0, UCM_REQ_PDATA);
	h[1] = (uint8_t)((v4 ? 4 : 6) << 4);
	h[2] = (uint8_t)(opt.src_port >> 8);
	h[3] = (uint8_t)opt.src_port;
	if (v4) {
		memcpy(h + 4 + 12, src + 12, 4);
		memcpy(h + 20 + 12, dst + 12, 4);
	} else {
		memcpy(h + 4, src, 16);
		memcpy(h + 20, dst, 16);
	}
	if (ulen)
		memcpy(h + CMA_HDR_LEN, opt.pdata, ulen);
	return CMA_HDR_LEN + ulen;
}

/* printable copy of the peer's private data (up to the last non-zero byte) */
static void note_pdata(struct conn *c, const char *what, const uint8_t *d, size_t n)
{
	size_t last = 0, o;
	for (size_t i = 0; i < n; i++)
		if (d[i])
			last = i + 1;
	o = (size_t)snprintf(c->pdnote, sizeof(c->pdnote), "%s '", what);
	for (size_t i = 0; i < last && o + 6 < sizeof(c->pdnote); i++)
		o += (size_t)snprintf(c->pdnote + o, sizeof(c->pdnote) - o,
				      d[i] >= 0x20 && d[i] < 0x7f && d[i] != '\\' && d[i] != '\'' ? "%c" : "\\x%02x", d[i]);
	snprintf(c->pdnote + o, sizeof(c->pdnote) - o, "'");
	c->note = c->pdnote;
}

/* ------------------------------------------------------------------------ */
/* Connection life cycle                                                     */

static long started, finished, ok_count;

static void finish_conn(struct conn *c)
{
	/* DESTROY_ID honouring events_reported (libibcm waited for its acks
	 * to reach that number; we compare with what we counted). */
	char extra[600] = "";
	if (c->have_id) {
		uint32_t er = 0;
		if (ucm_destroy_id(c->id, &er)) {
			if (!c->failed)
				conn_fail_cmd(c);
			else
				snprintf(extra, sizeof(extra), "; also %s", cmd_err);
		} else if (er != c->events) {
			if (!c->failed)
				conn_fail(c, "DESTROY_ID: events_reported %u, but GET_EVENT delivered %u",
					  er, c->events);
			else
				snprintf(extra, sizeof(extra), "; DESTROY_ID events_reported %u vs %u",
					 er, c->events);
		}
		c->have_id = 0;
	}
	teardown_qp(c);
	unlink_conn(c);
	finished++;
	double ms = now_msf() - c->t0;
	if (c->role == ROLE_LISTENER) {
		if (c->failed) {
			any_failure = 1;
			printf("listener id %u FAIL: %s%s\n", c->id, c->err, extra);
		} else {
			logv(1, "listener id %u destroyed, events_reported %u", c->id, c->events);
		}
		fflush(stdout);
		free(c);
		return;
	}
	if (c->failed) {
		any_failure = 1;
		printf("conn %d FAIL (id %u, %s): %s%s\n", c->num, c->id,
		       c->role == ROLE_CLIENT ? "client" : "server", c->err, extra);
	} else {
		ok_count++;
		if (!opt.quiet)
			printf("conn %d ok: %s id %u qpn 0x%06x remote_qpn 0x%06x msgs %d+%d x %dB "
			       "established_by %s events %u timewait %s %.1f ms%s%s\n",
			       c->num, c->role == ROLE_CLIENT ? "client" : "server", c->id, c->qpn, c->rqpn,
			       (opt.no_verbs || !c->peer_verbs) ? 0 : c->msgs,
			       (opt.no_verbs || !c->peer_verbs) ? 0 : c->msgs, c->msg_size,
			       c->est_by ? c->est_by : "-", c->events, c->timewait_seen ? "yes" : "no", ms,
			       c->note ? "; " : "", c->note ? c->note : "");
	}
	fflush(stdout);
	free(c);
}

static struct conn *new_conn(enum role role, int num)
{
	struct conn *c = calloc(1, sizeof(*c));
	if (!c) {
		errmsg("out of memory");
		exit(1);
	}
	c->role = role;
	c->num = num;
	c->t0 = now_msf();
	c->psn = xrand32() & 0xffffff;
	c->msgs = opt.msgs;
	c->msg_size = opt.msg_size;
	c->peer_verbs = !opt.no_verbs;
	link_conn(c);
	return c;
}

static void client_start(int num)
{
	struct conn *c = new_conn(ROLE_CLIENT, num);
	started++;
	c->nonce = xrand32();
	c->rr = 4;
	c->idepth = 2;
	if (!opt.no_verbs) {
		if (vb.dattr.max_qp_rd_atom < c->rr)
			c->rr = (uint8_t)vb.dattr.max_qp_rd_atom;
		if (vb.dattr.max_qp_init_rd_atom < c->idepth)
			c->idepth = (uint8_t)vb.dattr.max_qp_init_rd_atom;
	}
	if (setup_qp(c))
		return;
	if (ucm_create_id((uint64_t)(uintptr_t)c, &c->id)) {
		conn_fail_cmd(c);
		return;
	}
	c->have_id = 1;
	if (find_by_id(c->id) != c) {
		conn_fail(c, "CREATE_ID returned id %u, which is still live", c->id);
		return;
	}

	/* Path record built from the GIDs (RoCE: LIDs 0, P_Key 0xffff). */
	static struct ucm_user_path_rec path; /* one REQ at a time: fine */
	memset(&path, 0, sizeof(path));
	memcpy(path.dgid, opt.rgid, 16);
	memcpy(path.sgid, opt.sgid, 16);
	/* InfiniBand: the verbs port says so; --no-verbs: -L was given */
	int ib = opt.no_verbs ? opt.dlid >= 0 : vb.pattr.link_layer != IBV_LINK_LAYER_ETHERNET;
	if (ib) {
		path.dlid = htobe16((uint16_t)opt.dlid);
		path.slid = htobe16(opt.no_verbs ? (uint16_t)opt.slid : vb.pattr.lid);
		path.hop_limit = 0;
	} else {
		path.hop_limit = (uint8_t)opt.hop_limit;
	}
	path.reversible = 1;
	path.mtu = (uint32_t)opt.mtu;
	path.pkey = htobe16(0xffff);
	path.traffic_class = (uint8_t)opt.traffic_class;
	path.numb_path = 1;
	path.mtu_selector = 2; /* exactly */
	path.rate_selector = 2;
	path.rate = (uint8_t)opt.rate;
	path.packet_life_time_selector = 2;
	path.packet_life_time = (uint8_t)opt.plt;

	uint8_t hello[UCM_REQ_PDATA];
	size_t hello_len = HELLO_LEN;
	if (opt.rdma_cm)
		hello_len = make_cma_req_pd(hello);
	else
		make_hello(c, hello);
	struct ib_ucm_req req = {
		.id = c->id,
		.qpn = c->qpn,
		.qp_type = UCM_QPT_RC,
		.psn = c->psn,
		.sid = htobe64(opt.sid),
		.data = uptr(hello),
		.primary_path = uptr(&path),
		.alternate_path = 0,
		.len = (uint8_t)hello_len,
		.responder_resources = c->rr,
		.initiator_depth = c->idepth,
		.remote_cm_response_timeout = (uint8_t)opt.cm_timeout,
		.flow_control = 0,
		.local_cm_response_timeout = (uint8_t)opt.cm_timeout,
		.retry_count = (uint8_t)opt.retry_count,
		.rnr_retry_count = (uint8_t)opt.rnr_retry,
		.max_cm_retries = (uint8_t)opt.max_cm_retries,
		.srq = 0,
	};
	if (opt.verbose >= 2) {
		char a[64], b[64];
		logv(2, "conn %d id %u SEND_REQ sid 0x%" PRIx64 " qpn 0x%x psn 0x%x sgid %s dgid %s mtu %d",
		     num, c->id, opt.sid, c->qpn, c->psn, gidstr(opt.sgid, a, sizeof(a)),
		     gidstr(opt.rgid, b, sizeof(b)), opt.mtu);
	}
	if (ucm_write(IB_USER_CM_CMD_SEND_REQ, &req, sizeof(req), 0, 0)) {
		conn_fail_cmd(c);
		return;
	}
	c->st = C_REQ_SENT;
	set_wait(c, "REP");
}

static void client_send_dreq(struct conn *c);

/* Client: all data seen -> DREQ (after --hold). */
static void client_maybe_dreq(struct conn *c)
{
	if (c->st != C_DATA || !data_done(c))
		return;
	if (opt.data_before_rtu && !c->est_by) {
		uint8_t pd[SHORT_PD_LEN];
		short_pd(pd, MAGIC_RTU, c->nonce);
		if (ucm_private_data(IB_USER_CM_CMD_SEND_RTU, c->id, opt.rdma_cm ? NULL : pd,
				     opt.rdma_cm ? 0 : sizeof(pd))) {
			conn_fail_cmd(c);
			return;
		}
		c->est_by = "RTU(after data)";
	}
	if (opt.burst) {
		/* run_loop sends every DREQ once the round's last is here */
		c->st = C_HOLD;
		c->waiting = "the burst";
		c->deadline = 0;
		return;
	}
	if (opt.hold_ms > 0) {
		c->st = C_HOLD;
		c->waiting = "hold";
		c->deadline = now_ms() + (uint64_t)opt.hold_ms;
		logv(1, "conn %d: established, data done; holding %d ms before DREQ (pid %d)", c->num,
		     opt.hold_ms, (int)getpid());
		return;
	}
	client_send_dreq(c);
}

static void client_send_dreq(struct conn *c)
{
	uint8_t pd[SHORT_PD_LEN];
	short_pd(pd, MAGIC_DREQ, c->nonce);
	if (ucm_private_data(IB_USER_CM_CMD_SEND_DREQ, c->id, opt.rdma_cm ? NULL : pd,
			     opt.rdma_cm ? 0 : sizeof(pd))) {
		conn_fail_cmd(c);
		return;
	}
	c->st = C_DREQ_SENT;
	set_wait(c, "DREP");
}

/* Server: established and all client messages in -> replies; DREQ waiting
 * and data finished -> DREP. */
static void server_progress(struct conn *c)
{
	if (c->st != S_DATA)
		return;
	if (!opt.no_verbs && c->peer_verbs && c->rts && c->recvd == c->msgs && !c->sent_posted) {
		if (post_sends(c))
			return;
	}
	if (c->dreq_rcvd && data_done(c)) {
		uint8_t pd[SHORT_PD_LEN];
		short_pd(pd, MAGIC_DREP, c->nonce);
		if (ucm_private_data(IB_USER_CM_CMD_SEND_DREP, c->id, opt.rdma_cm ? NULL : pd,
				     opt.rdma_cm ? 0 : sizeof(pd))) {
			conn_fail_cmd(c);
			return;
		}
		if (opt.timewait_ms > 0) {
			c->st = X_TIMEWAIT;
			c->waiting = "TIMEWAIT_EXIT";
			c->deadline = now_ms() + (uint64_t)opt.timewait_ms;
		} else {
			c->st = X_DONE;
		}
	}
}

static void server_established(struct conn *c, const char *by)
{
	c->est_by = by;
	/* Without data the client sends DREQ right after RTU: the CM may be in
	 * DREQ_RCVD already, where INIT_QP_ATTR fails (EINVAL, as in the
	 * kernel). RTS was checked before SEND_REP instead. */
	if (!opt.no_verbs && c->peer_verbs && apply_qp_state(c, UCM_QPS_RTS, 0))
		return;
	c->st = S_DATA;
	set_wait(c, (opt.no_verbs || !c->peer_verbs) ? "DREQ" : "data/DREQ");
	server_progress(c);
}

/* ------------------------------------------------------------------------ */
/* Completions                                                               */

#ifdef UCMCLIENT_NO_VERBS
static void drain_completions(void)
{
}
#else
static void handle_wc(struct conn *c, const struct ibv_wc *wc)
{
	int send = (int)(wc->wr_id & 1);
	int idx = (int)(wc->wr_id >> 1);
	if (c->failed)
		return;
	if (wc->status != IBV_WC_SUCCESS) {
		conn_fail(c, "%s completion %d: status %d (%s), vendor_err 0x%x", send ? "send" : "recv",
			  idx, wc->status, ibv_wc_status_str(wc->status), wc->vendor_err);
		return;
	}
	if (send) {
		c->send_done++;
	} else {
		int dir = c->role == ROLE_CLIENT ? 1 : 0;
		uint8_t *want = malloc((size_t)c->msg_size);
		if (!want) {
			conn_fail(c, "out of memory");
			return;
		}
		fill_msg(c, want, dir, c->recvd);
		int bad = wc->byte_len != (uint32_t)c->msg_size || idx != c->recvd ||
			  memcmp(want, recv_buf(c, idx), (size_t)c->msg_size) != 0;
		free(want);
		if (bad) {
			conn_fail(c, "message %d: %u bytes in buffer %d do not match what the peer sent",
				  c->recvd, wc->byte_len, idx);
			return;
		}
		c->recvd++;
		/* Data before RTU: the passive side tells the CM (NOTIFY COMM_EST),
		 * as libibcm users did on IBV_EVENT_COMM_EST. */
		if (c->role == ROLE_SERVER && c->st == S_REP_SENT) {
			if (ucm_notify(c->id, UCM_EVENT_COMM_EST) == 0) {
				c->st = S_NOTIFIED;
				set_wait(c, "USER_ESTABLISHED");
			} else if (errno == EISCONN) {
				/* RTU already processed; its event is on its way */
				logv(1, "conn %d: NOTIFY -> EISCONN, waiting for RTU event", c->num);
			} else {
				conn_fail_cmd(c);
				return;
			}
		}
	}
	if (c->role == ROLE_CLIENT)
		client_maybe_dreq(c);
	else
		server_progress(c);
	if (!c->failed && c->st != X_DONE && c->st != X_TIMEWAIT && c->st != C_HOLD)
		c->deadline = now_ms() + (uint64_t)opt.wait_ms;
}

static void drain_completions(void)
{
	for (;;) {
		struct ibv_cq *cq;
		void *ctx;
		if (ibv_get_cq_event(vb.chan, &cq, &ctx))
			return; /* EAGAIN: channel is non-blocking */
		ibv_ack_cq_events(cq, 1);
		struct conn *c = ctx;
		if (ibv_req_notify_cq(cq, 0)) {
			conn_fail(c, "ibv_req_notify_cq: errno %d", errno);
			continue;
		}
		struct ibv_wc wc[16];
		int n;
		while ((n = ibv_poll_cq(cq, 16, wc)) > 0)
			for (int i = 0; i < n; i++)
				handle_wc(c, &wc[i]);
		if (n < 0)
			conn_fail(c, "ibv_poll_cq failed");
	}
}
#endif /* UCMCLIENT_NO_VERBS */

/* ------------------------------------------------------------------------ */
/* Events                                                                    */

/* present bits and data area per event, as ucm reported them */
static int check_present(struct conn *c, const struct ib_ucm_event_resp *ev, const uint8_t *data,
			 const uint8_t *info)
{
	uint32_t must = 0, may = 0;
	switch (ev->event) {
	case IB_CM_REQ_RECEIVED:
		must = IB_UCM_PRES_PRIMARY | IB_UCM_PRES_DATA; /* our REQs carry no alternate */
		break;
	case IB_CM_REP_RECEIVED:
	case IB_CM_RTU_RECEIVED:
	case IB_CM_DREQ_RECEIVED:
	case IB_CM_DREP_RECEIVED:
	case IB_CM_MRA_RECEIVED:
	case IB_CM_SIDR_REQ_RECEIVED:
		must = IB_UCM_PRES_DATA;
		break;
	case IB_CM_REJ_RECEIVED:
	case IB_CM_APR_RECEIVED:
	case IB_CM_SIDR_REP_RECEIVED:
		must = IB_UCM_PRES_DATA;
		may = IB_UCM_PRES_INFO;
		break;
	case IB_CM_LAP_RECEIVED:
		must = IB_UCM_PRES_DATA | IB_UCM_PRES_ALTERNATE;
		break;
	default:
		break;
	}
	const char *en = event_name(ev->event);
	if ((ev->present & must) != must || (ev->present & ~(must | may))) {
		conn_fail(c, "GET_EVENT %s: present 0x%x, expected 0x%x (optional 0x%x)", en, ev->present,
			  must, may);
		return -1;
	}
	if (ev->reserved != 0) {
		conn_fail(c, "GET_EVENT %s: reserved field is 0x%x", en, ev->reserved);
		return -1;
	}
	if (!(ev->present & IB_UCM_PRES_DATA)) {
		for (int i = 0; i < EVENT_BUF; i++)
			if (data[i] != CANARY) {
				conn_fail(c, "GET_EVENT %s: no DATA present but data buffer written", en);
				return -1;
			}
	}
	if (!(ev->present & IB_UCM_PRES_INFO)) {
		for (int i = 0; i < EVENT_BUF; i++)
			if (info[i] != CANARY) {
				conn_fail(c, "GET_EVENT %s: no INFO present but info buffer written", en);
				return -1;
			}
	}
	return 0;
}

static const char *rej_reason(uint32_t r)
{
	switch (r) {
	case 1: return "no QP";
	case 2: return "no EEC";
	case 3: return "no resources";
	case 4: return "timeout";
	case 5: return "unsupported";
	case 6: return "invalid comm id";
	case 7: return "invalid comm instance";
	case 8: return "invalid service id";
	case 9: return "invalid transport type";
	case 10: return "stale connection";
	case 11: return "RDC not exist";
	case 12: return "invalid GID";
	case 13: return "invalid LID";
	case 14: return "invalid SL";
	case 15: return "invalid traffic class";
	case 16: return "invalid hop limit";
	case 17: return "invalid packet rate";
	case 18: return "invalid alt GID";
	case 19: return "invalid alt LID";
	case 20: return "invalid alt SL";
	case 21: return "invalid alt traffic class";
	case 22: return "invalid alt hop limit";
	case 23: return "invalid alt packet rate";
	case 24: return "port CM redirect";
	case 25: return "port redirect";
	case 26: return "invalid MTU";
	case 27: return "insufficient responder resources";
	case 28: return "consumer defined";
	case 29: return "invalid RNR retry";
	case 30: return "duplicate local comm id";
	case 31: return "invalid class version";
	case 32: return "invalid flow label";
	case 33: return "invalid alt flow label";
	default: return "?";
	}
}

/* Events that end a connection attempt no matter where it is. */
static int common_bad_event(struct conn *c, const struct ib_ucm_event_resp *ev)
{
	switch (ev->event) {
	case IB_CM_REJ_RECEIVED:
		conn_fail(c, "REJ_RECEIVED while waiting for %s: reason %u (%s)", c->waiting,
			  ev->u.rej_resp.reason, rej_reason(ev->u.rej_resp.reason));
		return 1;
	case IB_CM_REQ_ERROR:
	case IB_CM_REP_ERROR:
	case IB_CM_DREQ_ERROR:
	case IB_CM_LAP_ERROR:
	case IB_CM_SIDR_REQ_ERROR:
		conn_fail(c, "%s while waiting for %s: send status %u", event_name(ev->event), c->waiting,
			  ev->u.send_status);
		return 1;
	default:
		return 0;
	}
}

static void unexpected(struct conn *c, const struct ib_ucm_event_resp *ev)
{
	if (!common_bad_event(c, ev))
		conn_fail(c, "unexpected %s (event %u) while waiting for %s", event_name(ev->event),
			  ev->event, c->waiting ? c->waiting : "-");
}

static void on_timewait(struct conn *c, const struct ib_ucm_event_resp *ev)
{
	if (ev->event == IB_CM_TIMEWAIT_EXIT) {
		c->timewait_seen = 1;
		c->st = X_DONE;
		return;
	}
	unexpected(c, ev);
}

static void client_event(struct conn *c, const struct ib_ucm_event_resp *ev, const uint8_t *data)
{
	switch (c->st) {
	case C_REQ_SENT: {
		if (ev->event == IB_CM_MRA_RECEIVED) {
			logv(1, "conn %d: MRA (service timeout %u)", c->num, ev->u.mra_resp.timeout);
			set_wait(c, "REP");
			return;
		}
		if (ev->event != IB_CM_REP_RECEIVED) {
			unexpected(c, ev);
			return;
		}
		const struct ib_ucm_rep_event_resp *r = &ev->u.rep_resp;
		if (opt.rdma_cm) {
			/* rdma_accept's data, no header: no checks beyond the area */
			if (check_pdata(c, "REP_RECEIVED", data, ev->present, NULL, UCM_REP_PDATA,
					UCM_REP_PDATA))
				return;
			note_pdata(c, "rep_pd", data, UCM_REP_PDATA);
			c->rqpn = r->remote_qpn;
			c->rpsn = r->starting_psn;
			c->peer_rnr = r->rnr_retry_count;
			logv(1, "conn %d: REP qpn 0x%x psn 0x%x rr %u id %u rnr %u", c->num, c->rqpn,
			     c->rpsn, r->responder_resources, r->initiator_depth, r->rnr_retry_count);
			goto rep_ok;
		}
		if (get32(data) != MAGIC_REP || get32(data + 4) != c->nonce) {
			conn_fail(c, "REP_RECEIVED: private data is not our server's reply "
				     "(magic 0x%08x nonce 0x%08x, want 0x%08x)",
				  get32(data), get32(data + 4), c->nonce);
			return;
		}
		uint8_t srv_rr = data[24], srv_id = data[25];
		c->peer_verbs = data[26] & 1;
		c->rqpn = get32(data + 12);
		c->rpsn = get32(data + 16);
		uint8_t want[HELLO_LEN];
		memcpy(want, data, 60);
		pattern(want + 60, HELLO_LEN - 60, ~c->nonce);
		if (check_pdata(c, "REP_RECEIVED", data, ev->present, want, HELLO_LEN, UCM_REP_PDATA))
			return;
		if (r->remote_qpn != c->rqpn || r->starting_psn != c->rpsn) {
			conn_fail(c, "REP_RECEIVED: remote_qpn 0x%x starting_psn 0x%x, server sent 0x%x/0x%x",
				  r->remote_qpn, r->starting_psn, c->rqpn, c->rpsn);
			return;
		}
		if (!opt.lax && (r->responder_resources != srv_id || r->initiator_depth != srv_rr ||
				 r->rnr_retry_count != SERVER_RNR_RETRY)) {
			conn_fail(c, "REP_RECEIVED: responder_resources %u initiator_depth %u rnr_retry %u; "
				     "server sent rr %u id %u rnr %u (expected swapped to our view)",
				  r->responder_resources, r->initiator_depth, r->rnr_retry_count, srv_rr,
				  srv_id, SERVER_RNR_RETRY);
			return;
		}
	rep_ok:
		if (apply_qp_state(c, UCM_QPS_INIT, 0) || apply_qp_state(c, UCM_QPS_RTR, 0) ||
		    apply_qp_state(c, UCM_QPS_RTS, 0))
			return;
		if (c->peer_verbs && post_recvs(c))
			return;
		if (!opt.data_before_rtu || opt.no_verbs || !c->peer_verbs) {
			uint8_t pd[SHORT_PD_LEN];
			short_pd(pd, MAGIC_RTU, c->nonce);
			if (ucm_private_data(IB_USER_CM_CMD_SEND_RTU, c->id, opt.rdma_cm ? NULL : pd,
					     opt.rdma_cm ? 0 : sizeof(pd))) {
				conn_fail_cmd(c);
				return;
			}
			c->est_by = "RTU";
		}
		c->st = C_DATA;
		set_wait(c, "data");
		if (c->peer_verbs && !opt.no_verbs && post_sends(c))
			return;
		client_maybe_dreq(c);
		return;
	}
	case C_DATA:
	case C_HOLD:
		unexpected(c, ev);
		return;
	case C_DREQ_SENT: {
		if (ev->event != IB_CM_DREP_RECEIVED) {
			unexpected(c, ev);
			return;
		}
		uint8_t want[SHORT_PD_LEN];
		short_pd(want, MAGIC_DREP, c->nonce);
		int zeros = 1;
		for (int i = 0; i < UCM_DREP_PDATA; i++)
			zeros &= data[i] == 0;
		if (zeros) {
			/* no private data: our DREQ was repeated (the DREP lost) after
			 * the peer destroyed its id, and the CM answered it without
			 * one (cm_issue_drep) */
			if (!opt.rdma_cm)
				c->note = "DREP without private data (DREQ repeated after the peer's id was gone)";
			if (check_pdata(c, "DREP_RECEIVED", data, ev->present, NULL, 0, UCM_DREP_PDATA))
				return;
		} else if (check_pdata(c, "DREP_RECEIVED", data, ev->present, opt.rdma_cm ? NULL : want,
				       opt.rdma_cm ? UCM_DREP_PDATA : sizeof(want), UCM_DREP_PDATA)) {
			return;
		}
		if (opt.timewait_ms > 0) {
			c->st = X_TIMEWAIT;
			c->waiting = "TIMEWAIT_EXIT";
			c->deadline = now_ms() + (uint64_t)opt.timewait_ms;
		} else {
			c->st = X_DONE;
		}
		return;
	}
	case X_TIMEWAIT:
		on_timewait(c, ev);
		return;
	default:
		unexpected(c, ev);
	}
}

static void server_event(struct conn *c, const struct ib_ucm_event_resp *ev, const uint8_t *data)
{
	switch (ev->event) {
	case IB_CM_RTU_RECEIVED:
		if (c->st != S_REP_SENT && c->st != S_NOTIFIED) {
			unexpected(c, ev);
			return;
		}
		{
			uint8_t want[SHORT_PD_LEN];
			short_pd(want, MAGIC_RTU, c->nonce);
			if (check_pdata(c, "RTU_RECEIVED", data, ev->present, opt.rdma_cm ? NULL : want,
					opt.rdma_cm ? UCM_RTU_PDATA : sizeof(want), UCM_RTU_PDATA))
				return;
		}
		server_established(c, c->st == S_NOTIFIED ? "RTU(after EISCONN)" : "RTU");
		return;
	case IB_CM_USER_ESTABLISHED:
		if (c->st != S_NOTIFIED) {
			unexpected(c, ev);
			return;
		}
		server_established(c, "COMM_EST");
		return;
	case IB_CM_DREQ_RECEIVED: {
		uint8_t want[SHORT_PD_LEN];
		short_pd(want, MAGIC_DREQ, c->nonce);
		int zeros = 1;
		for (int i = 0; i < UCM_DREQ_PDATA; i++)
			zeros &= data[i] == 0;
		if (zeros) {
			/* no private data: the CM sent it for a peer whose id was
			 * destroyed or whose file was closed (killed) */
			if (!opt.rdma_cm) /* rdma_disconnect sends none */
				c->note = "DREQ without private data (peer id destroyed / file closed)";
			if (check_pdata(c, "DREQ_RECEIVED", data, ev->present, NULL, 0, UCM_DREQ_PDATA))
				return;
		} else if (check_pdata(c, "DREQ_RECEIVED", data, ev->present, opt.rdma_cm ? NULL : want,
				       opt.rdma_cm ? UCM_DREQ_PDATA : sizeof(want), UCM_DREQ_PDATA)) {
			return;
		}
		if (c->st == S_REP_SENT && (opt.no_verbs || !c->peer_verbs)) {
			/* A DREQ implies establishment (the CM accepts it in
			 * REP_SENT); tolerated without data, noted in the line. */
			c->est_by = "DREQ(no RTU seen)";
			c->st = S_DATA;
		}
		if (c->st != S_DATA && c->st != S_NOTIFIED && c->st != S_REP_SENT) {
			unexpected(c, ev);
			return;
		}
		/* A client DREQs only after all our replies reached it, so we must
		 * have received everything and posted the replies (their send
		 * completions may still be on the way: then DREP waits for them). */
		int early = c->st != S_DATA ||
			    (!opt.no_verbs && c->peer_verbs && (c->recvd < c->msgs || c->sent_posted < c->msgs));
		if (early) {
			/* the peer went away early (e.g. it was killed: the CM of
			 * a closing file sends DREQ); answer it, then report */
			if (ucm_private_data(IB_USER_CM_CMD_SEND_DREP, c->id, NULL, 0))
				conn_fail(c, "peer disconnected (DREQ) before the data exchange finished "
					     "(recv %d/%d, sends done %d/%d); SEND_DREP failed too: %s",
					  c->recvd, c->msgs, c->send_done, c->msgs, cmd_err);
			else
				conn_fail(c, "peer disconnected (DREQ) before the data exchange finished "
					     "(recv %d/%d, sends done %d/%d)",
					  c->recvd, c->msgs, c->send_done, c->msgs);
			return;
		}
		c->dreq_rcvd = 1;
		server_progress(c);
		return;
	}
	case IB_CM_TIMEWAIT_EXIT:
		if (c->st == X_TIMEWAIT) {
			on_timewait(c, ev);
			return;
		}
		unexpected(c, ev);
		return;
	default:
		unexpected(c, ev);
	}
}

static long accepted;

static void listener_req(const struct ib_ucm_event_resp *ev, const uint8_t *data, const uint8_t *info)
{
	const struct ib_ucm_req_event_resp *q = &ev->u.req_resp;
	struct conn *c = new_conn(ROLE_SERVER, (int)accepted++);
	started++;
	if (find_by_id(ev->id)) {
		conn_fail(c, "REQ_RECEIVED: new id %u is already live", ev->id);
		return;
	}
	c->id = ev->id;
	c->have_id = 1;
	c->events = 0; /* the REQ counts on the listener */
	c->waiting = "REQ";
	if (check_present(c, ev, data, info))
		return;
	if (opt.rdma_cm) {
		/* rdma_cm's REQ: a cma_hdr, then the application's data */
		int ipver = data[1] >> 4;
		if (data[0] != 0 || (ipver != 4 && ipver != 6)) {
			conn_fail(c, "REQ_RECEIVED: private data does not start with a cma_hdr "
				     "(version %u, ip_version %u)", data[0], data[1]);
			return;
		}
		if (check_pdata(c, "REQ_RECEIVED", data, ev->present, NULL, UCM_REQ_PDATA, UCM_REQ_PDATA))
			return;
		uint8_t src[16] = { [10] = 0xff, [11] = 0xff }, dst[16] = { [10] = 0xff, [11] = 0xff };
		if (ipver == 4) {
			memcpy(src + 12, data + 16, 4);
			memcpy(dst + 12, data + 32, 4);
		} else {
			memcpy(src, data + 4, 16);
			memcpy(dst, data + 20, 16);
		}
		char a[64], b[64];
		printf("conn %d: REQ cma_hdr ipv%d src %s:%u dst %s sid 0x%" PRIx64 "\n", c->num, ipver,
		       ipstr(src, a, sizeof(a)), (unsigned)data[2] << 8 | data[3], ipstr(dst, b, sizeof(b)),
		       opt.sid);
		note_pdata(c, "req_pd", data + CMA_HDR_LEN, UCM_REQ_PDATA - CMA_HDR_LEN);
		c->rqpn = q->remote_qpn;
		c->rpsn = q->starting_psn;
		c->peer_verbs = !opt.no_verbs;
		c->peer_rr = q->initiator_depth; /* the event is in our view already */
		c->peer_id = q->responder_resources;
		c->peer_retry = q->retry_count;
		c->peer_rnr = q->rnr_retry_count;
		if (q->qp_type != UCM_QPT_RC) {
			conn_fail(c, "REQ_RECEIVED: qp_type %u, want RC", q->qp_type);
			return;
		}
		goto req_ok;
	}
	if (get32(data) != MAGIC_REQ) {
		conn_fail(c, "REQ_RECEIVED: private data magic 0x%08x is not a ucmclient REQ", get32(data));
		return;
	}
	c->nonce = get32(data + 4);
	c->num = (int)get32(data + 8);
	c->rqpn = get32(data + 12);
	c->rpsn = get32(data + 16);
	uint32_t mm = get32(data + 20);
	c->msgs = (int)(mm >> 16);
	c->msg_size = (int)(mm & 0xffff);
	c->peer_rr = data[24];
	c->peer_id = data[25];
	c->peer_verbs = data[26] & 1;
	c->peer_dbr = (data[26] >> 1) & 1;
	c->peer_retry = data[60];
	c->peer_rnr = data[61];
	uint8_t want[HELLO_LEN];
	memcpy(want, data, 62);
	pattern(want + 62, HELLO_LEN - 62, c->nonce);
	if (check_pdata(c, "REQ_RECEIVED", data, ev->present, want, HELLO_LEN, UCM_REQ_PDATA))
		return;
	if (c->peer_verbs && (c->msgs < 0 || c->msgs > 1024 || c->msg_size < 8)) {
		conn_fail(c, "REQ_RECEIVED: bad message count/size %d/%d", c->msgs, c->msg_size);
		return;
	}
	if (c->peer_verbs && opt.no_verbs) {
		conn_fail(c, "client moves RC data but this server runs --no-verbs");
		return;
	}
	if (q->remote_qpn != c->rqpn || q->starting_psn != c->rpsn || q->qp_type != UCM_QPT_RC) {
		conn_fail(c, "REQ_RECEIVED: remote_qpn 0x%x starting_psn 0x%x qp_type %u; client sent "
			     "0x%x/0x%x/RC",
			  q->remote_qpn, q->starting_psn, q->qp_type, c->rqpn, c->rpsn);
		return;
	}
req_ok:
	if (!opt.lax) {
		/* ucm's REQ event is already in our point of view: the peer's
		 * initiator depth is our responder resources and vice versa. */
		if (q->responder_resources != c->peer_id || q->initiator_depth != c->peer_rr) {
			conn_fail(c, "REQ_RECEIVED: responder_resources %u initiator_depth %u; client sent "
				     "rr %u id %u (expected swapped)",
				  q->responder_resources, q->initiator_depth, c->peer_rr, c->peer_id);
			return;
		}
		if (q->retry_count != c->peer_retry || q->rnr_retry_count != c->peer_rnr) {
			conn_fail(c, "REQ_RECEIVED: retry_count %u rnr_retry_count %u, client sent %u/%u",
				  q->retry_count, q->rnr_retry_count, c->peer_retry, c->peer_rnr);
			return;
		}
		if (!opt.rdma_cm &&
		    (memcmp(q->primary_path.dgid, data + 28, 16) || memcmp(q->primary_path.sgid, data + 44, 16))) {
			char a[64], b[64], x[64], y[64];
			conn_fail(c, "REQ_RECEIVED: primary path dgid %s sgid %s; client was %s -> %s",
				  gidstr(q->primary_path.dgid, a, sizeof(a)),
				  gidstr(q->primary_path.sgid, b, sizeof(b)), gidstr(data + 28, x, sizeof(x)),
				  gidstr(data + 44, y, sizeof(y)));
			return;
		}
		if (be16toh(q->primary_path.pkey) != 0xffff && !opt.no_verbs &&
		    vb.pattr.link_layer == IBV_LINK_LAYER_ETHERNET) {
			conn_fail(c, "REQ_RECEIVED: primary path pkey 0x%04x on RoCE",
				  be16toh(q->primary_path.pkey));
			return;
		}
		if (q->port == 0) {
			conn_fail(c, "REQ_RECEIVED: port is 0");
			return;
		}
	}
	if (opt.verbose >= 1) {
		char a[64], b[64];
		logv(1, "conn %d: REQ on id %u from %s (to %s) qpn 0x%x psn 0x%x port %u mtu %u hop %u",
		     c->num, c->id, gidstr(q->primary_path.dgid, a, sizeof(a)),
		     gidstr(q->primary_path.sgid, b, sizeof(b)), q->remote_qpn, q->starting_psn, q->port,
		     q->primary_path.mtu, q->primary_path.hop_limit);
	}

	/* our side, like cmpost: clamp to device limits */
	c->rr = q->responder_resources;
	c->idepth = q->initiator_depth;
	if (!opt.no_verbs) {
		if (c->rr > vb.dattr.max_qp_rd_atom)
			c->rr = (uint8_t)vb.dattr.max_qp_rd_atom;
		if (c->idepth > vb.dattr.max_qp_init_rd_atom)
			c->idepth = (uint8_t)vb.dattr.max_qp_init_rd_atom;
	}
	if (setup_qp(c))
		return;
	if (apply_qp_state(c, UCM_QPS_INIT, 0) || apply_qp_state(c, UCM_QPS_RTR, QPA_PRE_REP))
		return;
	if (c->peer_verbs && post_recvs(c))
		return;
	/* No data (so no ordering): RTS is checked now, in REQ_RCVD, where the
	 * kernel CM allows it and sq_psn/retry/rnr are known from the REQ.
	 * Later the client may already have sent RTU and DREQ. */
	if ((opt.no_verbs || !c->peer_verbs) && apply_qp_state(c, UCM_QPS_RTS, QPA_CHECK_ONLY))
		return;
	uint8_t pd[UCM_REP_PDATA];
	size_t pd_len = HELLO_LEN;
	if (opt.rdma_cm) {
		/* rdma_connect takes the REP's data as the application's: no header */
		pd_len = opt.pdata ? strlen(opt.pdata) : 0;
		memset(pd, 0, sizeof(pd));
		if (pd_len)
			memcpy(pd, opt.pdata, pd_len);
	} else {
		make_rep_pd(c, pd);
	}
	struct ib_ucm_rep rep = {
		.uid = (uint64_t)(uintptr_t)c, /* libibcm: the new id's own object */
		.data = pd_len ? uptr(pd) : 0,
		.id = c->id,
		.qpn = c->qpn,
		.psn = c->psn,
		.len = (uint8_t)pd_len,
		.responder_resources = c->rr,
		.initiator_depth = c->idepth,
		.target_ack_delay = 20,
		.failover_accepted = 0,
		.flow_control = 0,
		.rnr_retry_count = SERVER_RNR_RETRY,
		.srq = 0,
	};
	if (ucm_write(IB_USER_CM_CMD_SEND_REP, &rep, sizeof(rep), 0, 0)) {
		conn_fail_cmd(c);
		return;
	}
	/* now the CM knows our PSN: its RTR answer must carry it */
	if (apply_qp_state(c, UCM_QPS_RTR,
			   QPA_CHECK_ONLY | ((opt.no_verbs || !c->peer_verbs) ? QPA_MAY_BE_GONE : 0)))
		return;
	c->st = S_REP_SENT;
	set_wait(c, "RTU");
}

/* One GET_EVENT and its dispatch. Returns -1 on a device-level error. */
static int handle_one_event(void)
{
	static struct ib_ucm_event_resp ev;
	static uint8_t data[EVENT_BUF], info[EVENT_BUF];
	int r = ucm_get_event(&ev, data, info, opt.wait_ms);
	if (r == 0)
		return 0;
	if (r < 0) {
		errmsg("%s", cmd_err);
		any_failure = 1;
		return -1;
	}
	if (opt.verbose >= 3)
		hexdump("event", &ev, sizeof(ev));
	logv(2, "event %s (%u) uid 0x%" PRIx64 " id %u present 0x%x", event_name(ev.event), ev.event,
	     (uint64_t)ev.uid, ev.id, ev.present);
	if (ev.event >= IB_CM_EVENT_COUNT) {
		errmsg("GET_EVENT: event type %u out of range (uid 0x%" PRIx64 ", id %u)", ev.event,
		       (uint64_t)ev.uid, ev.id);
		any_failure = 1;
		return 0;
	}
	struct conn *c = find_by_uid(ev.uid);
	if (!c) {
		errmsg("GET_EVENT: %s for unknown uid 0x%" PRIx64 " (id %u)", event_name(ev.event),
		       (uint64_t)ev.uid, ev.id);
		any_failure = 1;
		return 0;
	}
	c->events++;
	if (c->failed || c->st == X_DONE)
		return 0; /* counted; the id is about to be destroyed */
	if (c->role == ROLE_LISTENER) {
		if (ev.event != IB_CM_REQ_RECEIVED) {
			conn_fail(c, "unexpected %s on the listener (id %u)", event_name(ev.event), ev.id);
			return 0;
		}
		if (ev.id == c->id) {
			conn_fail(c, "REQ_RECEIVED carries the listener's own id %u, not a new one", ev.id);
			return 0;
		}
		listener_req(&ev, data, info);
		return 0;
	}
	if (ev.id != c->id) {
		conn_fail(c, "GET_EVENT %s: id %u, but uid belongs to id %u", event_name(ev.event), ev.id,
			  c->id);
		return 0;
	}
	if (check_present(c, &ev, data, info))
		return 0;
	if (c->role == ROLE_CLIENT)
		client_event(c, &ev, data);
	else
		server_event(c, &ev, data);
	if (!c->failed && c->st != X_DONE && c->st != X_TIMEWAIT && c->st != C_HOLD && c->deadline)
		c->deadline = now_ms() + (uint64_t)opt.wait_ms;
	return 0;
}

/* ------------------------------------------------------------------------ */
/* Main loop                                                                 */

static void *watchdog(void *arg)
{
	int secs = (int)(intptr_t)arg;
	struct timespec ts = { .tv_sec = secs };
	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
	fprintf(stderr, PROG ": overall deadline of %d s exceeded (-T); exiting\n", secs);
	fflush(stdout);
	_exit(3);
	return NULL;
}

/* --burst: each round's time from its first start until its last
 * connection was up (the kernel anchor's -H, test/perf/rdmaconn.c) */
static double burst_s;

/* burst_release ends a round once every connection left in it is held:
 * the time until then counts, and all send their DREQs together. */
static void burst_release(double round_t0)
{
	long live = 0, held = 0;
	for (struct conn *c = conns; c; c = c->next) {
		if (c->role == ROLE_LISTENER)
			continue;
		live++;
		held += c->st == C_HOLD;
	}
	if (held == 0 || held != live)
		return;
	double ms = now_msf() - round_t0;
	burst_s += ms / 1000;
	logv(1, "burst: %ld connections up in %.1f ms; DREQ to all", held, ms);
	for (struct conn *c = conns; c; c = c->next)
		if (c->st == C_HOLD)
			client_send_dreq(c);
}

static int run_loop(long total)
{
	double round_t0 = 0;
	for (;;) {
		/* reap finished connections */
		for (struct conn *c = conns, *n; c; c = n) {
			n = c->next;
			if (c->role != ROLE_LISTENER && (c->st == X_DONE || c->failed))
				finish_conn(c);
		}
		if (opt.client) {
			long live = 0;
			for (struct conn *c = conns; c; c = c->next)
				live++;
			/* --burst: the next round once the last has finished */
			if (opt.burst && live == 0 && started < total && !stop_requested)
				round_t0 = now_msf();
			while (started < total && live < opt.parallel && !stop_requested &&
			       (!opt.burst || started % opt.parallel || live == 0)) {
				client_start((int)started);
				live++;
			}
			if (!conns && (started >= total || stop_requested))
				return 0;
			/* a failed start is reaped at the top of the loop */
			int need_reap = 0;
			for (struct conn *c = conns; c; c = c->next)
				need_reap |= c->failed || c->st == X_DONE;
			if (need_reap)
				continue;
			if (opt.burst)
				burst_release(round_t0);
		} else {
			long done = finished;
			if ((total > 0 && done >= total && conns == listener && listener->next == NULL) ||
			    (stop_requested && conns == listener))
				return 0;
			if (listener->failed)
				return -1;
		}
		if (stop_requested) {
			for (struct conn *c = conns; c; c = c->next)
				if (c->role != ROLE_LISTENER)
					conn_fail(c, "interrupted");
			continue;
		}

		/* next deadline */
		uint64_t now = now_ms(), next = UINT64_MAX;
		for (struct conn *c = conns; c; c = c->next)
			if (c->role != ROLE_LISTENER && c->deadline && c->deadline < next)
				next = c->deadline;
		int tmo = -1;
		if (next != UINT64_MAX)
			tmo = next <= now ? 0 : (int)(next - now);
		struct pollfd pfd[2] = { { .fd = dev.fd, .events = POLLIN } };
		int nfd = 1;
		if (!opt.no_verbs) {
			pfd[1].fd = vb.chan->fd;
			pfd[1].events = POLLIN;
			nfd = 2;
		}
		if (opt.libibcm) {
			/* libibcm's ib_cm_get_event: one blocking write, nothing
			 * polled before it; per-connection timeouts cannot fire
			 * (the -T deadline still bounds the run) */
			if (handle_one_event() < 0)
				return -1;
			continue;
		}
		int r = poll(pfd, (nfds_t)nfd, tmo);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			errmsg("poll: %s", strerror(errno));
			return -1;
		}
		if (nfd == 2 && (pfd[1].revents & POLLIN))
			drain_completions();
		if (pfd[0].revents & (POLLERR | POLLHUP | POLLNVAL)) {
			errmsg("poll on %s: revents 0x%x", dev.path, pfd[0].revents);
			return -1;
		}
		if (pfd[0].revents & POLLIN) {
			if (handle_one_event() < 0)
				return -1;
		}
		now = now_ms();
		for (struct conn *c = conns; c; c = c->next) {
			if (c->role == ROLE_LISTENER || !c->deadline || c->deadline > now)
				continue;
			if (c->st == X_TIMEWAIT) {
				c->st = X_DONE; /* TIMEWAIT_EXIT is optional */
				continue;
			}
			if (c->st == C_HOLD) {
				client_send_dreq(c);
				continue;
			}
			if (c->st == X_DONE || c->failed)
				continue;
			conn_fail(c, "timed out after %d ms waiting for %s (recv %d/%d, sends done %d/%d)",
				  opt.wait_ms, c->waiting ? c->waiting : "?", c->recvd, c->msgs,
				  c->send_done, c->msgs);
		}
	}
}

/* ------------------------------------------------------------------------ */
/* --cred-check: who may write to an open fd                                 */

/*
 * The kernel's ib_safe_file_access refused a write unless the writer's
 * credentials were the ones current at open: another thread of the opener
 * shares them; a forked child and an exec'd program have new ones, so they
 * got EACCES on an inherited fd, whatever their uid. --cred-check opens the
 * node, creates two ids A and B, and checks:
 *   - another thread: CREATE_ID, ATTR_ID(A), DESTROY_ID of its own id work;
 *   - a forked child: CREATE_ID, ATTR_ID(A), DESTROY_ID(B) get EACCES (and
 *     its own open of the node works);
 *   - an exec'd program on the inherited fd: the same three get EACCES;
 *   - afterwards the opener still has A and B (ATTR_ID, DESTROY_ID).
 * One line per check; exit 0 only if every check passed.
 */
static int cred_fails, cred_checks;

static void cred_result(const char *who, const char *what, int want_eacces, int r)
{
	int ok = want_eacces ? r < 0 && errno == EACCES : r == 0;
	cred_checks++;
	if (ok)
		printf("ok   %s: %s %s\n", who, what, want_eacces ? "-> EACCES" : "allowed");
	else if (r == 0)
		printf("FAIL %s: %s succeeded, want EACCES\n", who, what);
	else
		printf("FAIL %s: %s%s\n", who, cmd_err, want_eacces ? "; want EACCES" : "");
	if (!ok)
		cred_fails++;
	fflush(stdout);
}

/* What another process does with the opener's ids: every command refused. */
static void cred_foreign(const char *who, uint32_t a, uint32_t b)
{
	uint32_t id, n;
	struct ib_ucm_attr_id_resp ar;
	cred_result(who, "CREATE_ID", 1, ucm_create_id(0xc0de, &id));
	cred_result(who, "ATTR_ID of the opener's id A", 1, ucm_attr_id(a, &ar));
	cred_result(who, "DESTROY_ID of the opener's id B", 1, ucm_destroy_id(b, &n));
}

static uint32_t cred_a;
static void *cred_thread(void *arg)
{
	const char *who = "another thread";
	uint32_t id = 0, n;
	struct ib_ucm_attr_id_resp ar;
	(void)arg;
	int r = ucm_create_id(0x7d, &id);
	cred_result(who, "CREATE_ID", 0, r);
	cred_result(who, "ATTR_ID of the opener's id A", 0, ucm_attr_id(cred_a, &ar));
	if (r == 0)
		cred_result(who, "DESTROY_ID of its own id", 0, ucm_destroy_id(id, &n));
	return NULL;
}

/* Waits for a child that ran checks and exits with its failure count. */
static void cred_wait(pid_t pid, const char *who)
{
	int st;
	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR) {
			printf("FAIL %s: waitpid: %s\n", who, strerror(errno));
			cred_fails++;
			return;
		}
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
		printf("FAIL %s: exit status 0x%x (its checks above)\n", who, (unsigned)st);
		cred_fails++;
	}
	fflush(stdout);
}

/* --cred-check-exec FD:A:B, in the exec'd program: the fd is inherited. */
static int cred_exec_main(void)
{
	unsigned a, b;
	int fd;
	if (sscanf(opt.cred_exec, "%d:%u:%u", &fd, &a, &b) != 3) {
		errmsg("bad --cred-check-exec '%s'", opt.cred_exec);
		return 2;
	}
	dev.fd = fd;
	snprintf(dev.path, sizeof(dev.path), "inherited fd %d", fd);
	cred_foreign("exec'd program", a, b);
	return cred_fails ? 1 : 0;
}

static int cred_check_main(void)
{
	uint32_t a, b, n;
	struct ib_ucm_attr_id_resp ar;
	static int obj_a, obj_b;
	if (open_ucm(opt.devname))
		return 1;
	if (ucm_create_id(uptr(&obj_a), &a) || ucm_create_id(uptr(&obj_b), &b)) {
		errmsg("%s", cmd_err);
		return 1;
	}
	/* the ABI's u64 pointers: a 32-bit client's stack is near 4 GiB */
	printf("%s: opener pid %d created ids A=%u B=%u (%zu-byte pointers, stack at 0x%" PRIx64 ")\n",
	       dev.path, (int)getpid(), a, b, sizeof(void *), uptr(&ar));
	cred_result("opener", "ATTR_ID of A", 0, ucm_attr_id(a, &ar));

	cred_a = a;
	pthread_t th;
	if (pthread_create(&th, NULL, cred_thread, NULL) != 0) {
		errmsg("pthread_create failed");
		return 1;
	}
	pthread_join(th, NULL);

	fflush(stdout);
	pid_t pid = fork();
	if (pid == 0) {
		cred_foreign("forked child", a, b);
		/* its own open is its own: allowed */
		int inherited = dev.fd;
		dev.fd = open(dev.path, O_RDWR);
		uint32_t id;
		int r = dev.fd < 0 ? -1 : ucm_create_id(0x0c, &id);
		if (dev.fd < 0)
			snprintf(cmd_err, sizeof(cmd_err), "open: %s", strerror(errno));
		cred_result("forked child", "CREATE_ID on its own open of the node", 0, r);
		if (dev.fd >= 0)
			close(dev.fd);
		dev.fd = inherited;
		_exit(cred_fails ? 1 : 0);
	}
	if (pid < 0) {
		errmsg("fork: %s", strerror(errno));
		return 1;
	}
	cred_wait(pid, "forked child");

	pid = fork();
	if (pid == 0) {
		char arg[64];
		snprintf(arg, sizeof(arg), "%d:%u:%u", dev.fd, a, b);
		fcntl(dev.fd, F_SETFD, 0); /* inherited across exec */
		execl("/proc/self/exe", PROG, "--cred-check-exec", arg, (char *)NULL);
		printf("FAIL exec'd program: execl /proc/self/exe: %s\n", strerror(errno));
		_exit(1);
	}
	if (pid < 0) {
		errmsg("fork: %s", strerror(errno));
		return 1;
	}
	cred_wait(pid, "exec'd program");

	cred_result("opener", "ATTR_ID of A after the others", 0, ucm_attr_id(a, &ar));
	int r = ucm_destroy_id(b, &n);
	cred_result("opener", "DESTROY_ID of B", 0, r);
	if (r == 0 && n != 0) {
		printf("FAIL opener: DESTROY_ID of B: events_reported %u, want 0\n", n);
		cred_fails++;
	}
	cred_result("opener", "DESTROY_ID of A", 0, ucm_destroy_id(a, &n));
	printf("cred-check: %s (%d checks here, the children's above)\n",
	       cred_fails ? "FAILED" : "all ok", cred_checks);
	return cred_fails ? 1 : 0;
}

/* ------------------------------------------------------------------------ */
/* Arguments                                                                 */

static void usage(FILE *f)
{
	fprintf(f,
		"usage: " PROG " -l SERVICE_ID [options]          server: listen, accept, echo data\n"
		"       " PROG " -c -g REMOTE_GID [options]       client: connect, send, disconnect\n"
		"       " PROG " --dump-commands                  print every command's wire image\n"
		"       " PROG " --cred-check [-D PATH|-d DEV]    another thread may use our fd; a forked\n"
		"                                          child or an exec'd program gets EACCES\n"
		"\n"
		"device:\n"
		"  -d, --device NAME      verbs device (default: first device; no-verbs: ucm0's ibdev)\n"
		"  -D, --ucm-dev PATH     open this ucm node, skip /sys/class/infiniband_cm discovery\n"
		"  -i, --port N           port number (default 1)\n"
		"  -x, --gid-index N      local GID index (client, default 0)\n"
		"  -G, --sgid GID         local GID (required with --no-verbs on the client)\n"
		"  -g, --gid GID          remote GID (client)\n"
		"  -L, --dlid LID         remote LID (InfiniBand link layer only; with --no-verbs it\n"
		"                         selects an IB path: LIDs, no GRH, and needs --slid)\n"
		"      --slid LID         local LID for an IB path with --no-verbs\n"
		"connections:\n"
		"  -s, --service SID      client's service id (default 0x1000)\n"
		"  -n, --count N          rounds: total connections = N x P (server: 0 = run until signal)\n"
		"  -P, --parallel P       connections in flight at once (default 1)\n"
		"  -M, --msgs N           RC messages each way per connection (default 4)\n"
		"  -z, --size BYTES       message size (default 64)\n"
		"      --no-verbs         no QP, no data; fake QPN (simulated fabric)\n"
		"      --data-before-rtu  client sends data before RTU (server must NOTIFY COMM_EST)\n"
		"      --hold MS          client: stay connected MS after the data, then DREQ\n"
		"      --burst            client: rounds of -P started at once, each held until all\n"
		"                         are established, then all DREQ (burst_conn_per_s)\n"
		"rdma_cm peer (librdmacm, TCP port space):\n"
		"      --rdma-cm          SID 0x1060000|port; client REQ data = cma_hdr + --pdata,\n"
		"                         any REP data; server takes a REQ with a cma_hdr, REP data\n"
		"                         = --pdata; messages as test/interop/cmpeer sends them\n"
		"      --pdata STR        user private data (client: after the cma_hdr; server: REP)\n"
		"      --src-ip ADDR      cma_hdr source address (default: from the local GID)\n"
		"      --dst-ip ADDR      cma_hdr destination address (default: from the remote GID)\n"
		"      --src-port N       cma_hdr source port (default: random 32768..60999)\n"
		"path / CM parameters (client):\n"
		"      --mtu N            path MTU enum 1..5 (default: port active_mtu, no-verbs 3)\n"
		"      --hop-limit N      (default 64)   --rate N (default 3)   --plt N (default 16)\n"
		"      --retry N          retry_count (default 5)   --rnr-retry N (default 6)\n"
		"      --cm-timeout N     CM response timeouts (default 20)   --cm-retries N (default 5)\n"
		"timeouts and checks:\n"
		"  -t, --timeout MS       every wait (default 10000)\n"
		"  -w, --timewait MS      how long to wait for TIMEWAIT_EXIT, 0 = don't (default 3000)\n"
		"  -T, --deadline SEC     whole run, then exit 3 (default 60 + 10 x N)\n"
		"      --nonblock         set O_NONBLOCK on the ucm fd\n"
		"      --libibcm          as libibcm: GET_EVENT blocks, no poll() and no per-command\n"
		"                         timer (needs --no-verbs or -M 0; -T bounds the run)\n"
		"      --cmd-times        print each command's write() latency at exit (p10/p50/p90 µs\n"
		"                         per command: ucmclient-cmdtime lines)\n"
		"      --lax              check masks only, not QP attribute / event values\n"
		"  -v, --verbose          more output (-vv: values, -vvv: hex of every command/event)\n"
		"  -q, --quiet            no line for a connection that succeeded (failures, the\n"
		"                         summary and -v output stay): a loop that is timed\n"
		"  -h, --help\n"
		"Environment: SYSFS_PATH replaces /sys for abi_version only (as in libibcm);\n"
		"ucm<N>/ibdev is always read from /sys/class/infiniband_cm.\n"
		"Exit: 0 all connections ok, 1 a failure, 2 usage, 3 overall deadline.\n");
}

static long parse_num(const char *s, const char *what, long lo, long hi)
{
	char *end;
	errno = 0;
	long long v = strtoll(s, &end, 0);
	if (errno || *end || end == s || v < lo || v > hi) {
		errmsg("bad %s '%s' (want %ld..%ld)", what, s, lo, hi);
		exit(2);
	}
	return (long)v;
}

static void parse_gid(const char *s, uint8_t *gid, const char *what)
{
	if (inet_pton(AF_INET6, s, gid) != 1) {
		errmsg("bad %s '%s' (want an IPv6-style GID, e.g. fe80::1)", what, s);
		exit(2);
	}
}

enum {
	O_NOVERBS = 256, O_DBR, O_NONBLOCK_OPT, O_LAX, O_DUMP, O_MTU, O_HOP, O_RATE, O_PLT,
	O_RETRY, O_RNR, O_CMTMO, O_CMRETRY, O_SLID, O_HOLD, O_RDMACM, O_PDATA, O_SRCIP, O_DSTIP,
	O_SPORT, O_CRED, O_CREDEXEC, O_LIBIBCM, O_CMDTIMES, O_BURST,
};

/* an IPv4 or IPv6 address, kept IPv4-mapped for IPv4 */
static void parse_ip(const char *s, uint8_t *a, const char *what)
{
	memset(a, 0, 16);
	if (inet_pton(AF_INET, s, a + 12) == 1) {
		a[10] = a[11] = 0xff;
		return;
	}
	if (inet_pton(AF_INET6, s, a) != 1) {
		errmsg("bad %s '%s' (want an IPv4 or IPv6 address)", what, s);
		exit(2);
	}
}

static void parse_args(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "listen", required_argument, 0, 'l' },   { "connect", no_argument, 0, 'c' },
		{ "service", required_argument, 0, 's' },  { "device", required_argument, 0, 'd' },
		{ "ucm-dev", required_argument, 0, 'D' },  { "port", required_argument, 0, 'i' },
		{ "gid-index", required_argument, 0, 'x' }, { "gid", required_argument, 0, 'g' },
		{ "sgid", required_argument, 0, 'G' },     { "dlid", required_argument, 0, 'L' },
		{ "count", required_argument, 0, 'n' },    { "parallel", required_argument, 0, 'P' },
		{ "msgs", required_argument, 0, 'M' },     { "size", required_argument, 0, 'z' },
		{ "timeout", required_argument, 0, 't' },  { "timewait", required_argument, 0, 'w' },
		{ "deadline", required_argument, 0, 'T' }, { "verbose", no_argument, 0, 'v' },
		{ "quiet", no_argument, 0, 'q' },
		{ "help", no_argument, 0, 'h' },	   { "no-verbs", no_argument, 0, O_NOVERBS },
		{ "data-before-rtu", no_argument, 0, O_DBR }, { "nonblock", no_argument, 0, O_NONBLOCK_OPT },
		{ "lax", no_argument, 0, O_LAX },	   { "dump-commands", no_argument, 0, O_DUMP },
		{ "mtu", required_argument, 0, O_MTU },    { "hop-limit", required_argument, 0, O_HOP },
		{ "rate", required_argument, 0, O_RATE },  { "plt", required_argument, 0, O_PLT },
		{ "retry", required_argument, 0, O_RETRY }, { "rnr-retry", required_argument, 0, O_RNR },
		{ "cm-timeout", required_argument, 0, O_CMTMO },
		{ "cm-retries", required_argument, 0, O_CMRETRY },
		{ "slid", required_argument, 0, O_SLID },
		{ "hold", required_argument, 0, O_HOLD },
		{ "rdma-cm", no_argument, 0, O_RDMACM },
		{ "pdata", required_argument, 0, O_PDATA },
		{ "src-ip", required_argument, 0, O_SRCIP },
		{ "dst-ip", required_argument, 0, O_DSTIP },
		{ "src-port", required_argument, 0, O_SPORT },
		{ "cred-check", no_argument, 0, O_CRED },
		{ "cred-check-exec", required_argument, 0, O_CREDEXEC },
		{ "libibcm", no_argument, 0, O_LIBIBCM },
		{ "cmd-times", no_argument, 0, O_CMDTIMES },
		{ "burst", no_argument, 0, O_BURST },
		{ 0, 0, 0, 0 },
	};
	int ch;
#ifdef UCMCLIENT_NO_VERBS
	opt.no_verbs = 1; /* nothing else is compiled in */
#endif
	while ((ch = getopt_long(argc, argv, "l:cs:d:D:i:x:g:G:L:n:P:M:z:t:w:T:vqh", lo, NULL)) != -1) {
		switch (ch) {
		case 'l': {
			char *end;
			errno = 0;
			opt.sid = strtoull(optarg, &end, 0);
			if (errno || *end || end == optarg) {
				errmsg("bad service id '%s'", optarg);
				exit(2);
			}
			opt.server = 1;
			break;
		}
		case 's': {
			char *end;
			errno = 0;
			opt.sid = strtoull(optarg, &end, 0);
			if (errno || *end || end == optarg) {
				errmsg("bad service id '%s'", optarg);
				exit(2);
			}
			break;
		}
		case 'c': opt.client = 1; break;
		case 'd': opt.devname = optarg; break;
		case 'D': opt.ucm_path = optarg; break;
		case 'i': opt.port = (int)parse_num(optarg, "port", 1, 255); break;
		case 'x':
			opt.gid_index = (int)parse_num(optarg, "GID index", 0, 65535);
			opt.have_gid_index = 1;
			break;
		case 'g': parse_gid(optarg, opt.rgid, "remote GID"); opt.have_rgid = 1; break;
		case 'G': parse_gid(optarg, opt.sgid, "local GID"); opt.have_sgid = 1; break;
		case 'L': opt.dlid = (int)parse_num(optarg, "LID", 1, 0xbfff); break;
		case 'n': opt.count = parse_num(optarg, "count", 0, 1000000); break;
		case 'P': opt.parallel = (int)parse_num(optarg, "parallel", 1, 1000); break;
		case 'M': opt.msgs = (int)parse_num(optarg, "msgs", 0, 1024); break;
		case 'z': opt.msg_size = (int)parse_num(optarg, "size", 8, 65535); break;
		case 't': opt.wait_ms = (int)parse_num(optarg, "timeout", 1, 3600000); break;
		case 'w': opt.timewait_ms = (int)parse_num(optarg, "timewait", 0, 3600000); break;
		case 'T': opt.deadline_s = (int)parse_num(optarg, "deadline", 1, 86400); break;
		case 'v': opt.verbose++; break;
		case 'q': opt.quiet = 1; break;
		case 'h': usage(stdout); exit(0);
		case O_NOVERBS: opt.no_verbs = 1; break;
		case O_DBR: opt.data_before_rtu = 1; break;
		case O_NONBLOCK_OPT: opt.nonblock = 1; break;
		case O_LAX: opt.lax = 1; break;
		case O_DUMP: opt.dump = 1; break;
		case O_MTU: opt.mtu = (int)parse_num(optarg, "mtu", 1, 5); break;
		case O_HOP: opt.hop_limit = (int)parse_num(optarg, "hop limit", 0, 255); break;
		case O_RATE: opt.rate = (int)parse_num(optarg, "rate", 0, 63); break;
		case O_PLT: opt.plt = (int)parse_num(optarg, "packet life time", 0, 63); break;
		case O_RETRY: opt.retry_count = (int)parse_num(optarg, "retry", 0, 7); break;
		case O_RNR: opt.rnr_retry = (int)parse_num(optarg, "rnr retry", 0, 7); break;
		case O_CMTMO: opt.cm_timeout = (int)parse_num(optarg, "cm timeout", 0, 31); break;
		case O_CMRETRY: opt.max_cm_retries = (int)parse_num(optarg, "cm retries", 0, 15); break;
		case O_SLID: opt.slid = (int)parse_num(optarg, "LID", 1, 0xbfff); break;
		case O_HOLD: opt.hold_ms = (int)parse_num(optarg, "hold", 0, 3600000); break;
		case O_RDMACM: opt.rdma_cm = 1; break;
		case O_PDATA: opt.pdata = optarg; break;
		case O_SRCIP: parse_ip(optarg, opt.src_ip, "source address"); opt.have_src_ip = 1; break;
		case O_DSTIP: parse_ip(optarg, opt.dst_ip, "destination address"); opt.have_dst_ip = 1; break;
		case O_SPORT: opt.src_port = (int)parse_num(optarg, "source port", 1, 65535); break;
		case O_CRED: opt.cred_check = 1; break;
		case O_CREDEXEC: opt.cred_exec = optarg; break;
		case O_LIBIBCM: opt.libibcm = 1; break;
		case O_CMDTIMES: opt.cmd_times = 1; break;
		case O_BURST: opt.burst = 1; break;
		default: usage(stderr); exit(2);
		}
	}
	if (optind < argc) {
		errmsg("unexpected argument '%s'", argv[optind]);
		usage(stderr);
		exit(2);
	}
	if (opt.dump)
		return;
	if (opt.cred_check || opt.cred_exec) {
		if (opt.server || opt.client) {
			errmsg("--cred-check takes no -l or -c");
			exit(2);
		}
		opt.no_verbs = 1; /* it moves no data */
		return;
	}
	if (opt.server == opt.client) {
		errmsg("give exactly one of -l SERVICE_ID (server) or -c (client)");
		usage(stderr);
		exit(2);
	}
	if (opt.client && !opt.have_rgid) {
		errmsg("client needs the remote GID (-g)");
		exit(2);
	}
	if (opt.client && opt.no_verbs && !opt.have_sgid) {
		errmsg("--no-verbs client needs the local GID (-G)");
		exit(2);
	}
	if (opt.client && opt.no_verbs && (opt.dlid >= 0) != (opt.slid >= 0)) {
		errmsg("an InfiniBand path with --no-verbs needs both -L (remote LID) and --slid");
		exit(2);
	}
	if (opt.client && opt.count == 0) {
		errmsg("client needs -n >= 1");
		exit(2);
	}
	if (opt.burst && (!opt.client || opt.hold_ms > 0)) {
		errmsg("--burst is for the client, without --hold");
		exit(2);
	}
	if (opt.libibcm && ((opt.client && !opt.no_verbs && opt.msgs > 0) || opt.hold_ms > 0 || opt.nonblock)) {
		/* nothing would drain the completion channel or fire a timer */
		errmsg("--libibcm needs --no-verbs or -M 0 (client), and no --hold or --nonblock");
		exit(2);
	}
	if (opt.rdma_cm) {
		/* rdma_cm's TCP port space: 0x0000000001060000 | port */
		if ((opt.sid & ~0xffffULL) != 0x1060000ULL) {
			errmsg("--rdma-cm: service id 0x%" PRIx64 " is not in rdma_cm's TCP port space "
			       "(0x1060000 | port)", opt.sid);
			exit(2);
		}
		size_t max = opt.client ? UCM_REQ_PDATA - CMA_HDR_LEN : UCM_REP_PDATA;
		if (opt.pdata && strlen(opt.pdata) > max) {
			errmsg("--pdata: %zu bytes, at most %zu fit", strlen(opt.pdata), max);
			exit(2);
		}
		if (!opt.src_port)
			opt.src_port = 32768 + (int)(xrand32() % 28232); /* Linux's ephemeral range */
		return; /* the peer is rdma_cm: its rnr_retry is its own */
	}
	if (opt.pdata || opt.have_src_ip || opt.have_dst_ip || opt.src_port) {
		errmsg("--pdata, --src-ip, --dst-ip and --src-port need --rdma-cm");
		exit(2);
	}
	if (opt.rnr_retry == SERVER_RNR_RETRY && !opt.lax) {
		errmsg("--rnr-retry %d equals the server's; value checks could not see a swap "
		       "(pick another or use --lax)",
		       SERVER_RNR_RETRY);
		exit(2);
	}
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	parse_args(argc, argv);
	if (opt.dump)
		return dump_commands();
	if (opt.cred_exec)
		return cred_exec_main();

	struct sigaction sa = { .sa_handler = on_alarm };
	sigemptyset(&sa.sa_mask);
	sigaction(SIGALRM, &sa, NULL); /* no SA_RESTART: a timed-out GET_EVENT returns EINTR */
	struct sigaction ss = { .sa_handler = on_stop };
	sigemptyset(&ss.sa_mask);
	sigaction(SIGINT, &ss, NULL);
	sigaction(SIGTERM, &ss, NULL);
	signal(SIGPIPE, SIG_IGN);

	long total = opt.count * opt.parallel;
	int deadline = opt.deadline_s ? opt.deadline_s : (int)(60 + 10 * (opt.count ? opt.count : 8640));
	/* The watchdog thread must not take SIGALRM/SIGINT/SIGTERM. */
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &old);
	pthread_t wd;
	if (pthread_create(&wd, NULL, watchdog, (void *)(intptr_t)deadline) == 0)
		pthread_detach(wd);
	pthread_sigmask(SIG_SETMASK, &old, NULL);

	if (opt.cred_check)
		return cred_check_main();

	const char *ibdev = opt.devname;
	if (!opt.no_verbs) {
		if (verbs_open())
			return 1;
		ibdev = vb.name;
		if (!opt.mtu)
			opt.mtu = vb.pattr.active_mtu;
		if (opt.client && vb.pattr.link_layer != IBV_LINK_LAYER_ETHERNET && opt.dlid < 0) {
			errmsg("%s port %d is InfiniBand: give the remote LID with -L", vb.name, opt.port);
			return 2;
		}
	} else if (!opt.mtu) {
		opt.mtu = 3; /* 1024 */
	}
	if (open_ucm(ibdev))
		return 1;

	if (opt.server) {
		listener = new_conn(ROLE_LISTENER, -1);
		if (ucm_create_id((uint64_t)(uintptr_t)listener, &listener->id)) {
			errmsg("%s", cmd_err);
			return 1;
		}
		listener->have_id = 1;
		if (ucm_listen(listener->id, opt.sid, 0)) {
			errmsg("%s (service id 0x%" PRIx64 ")", cmd_err, opt.sid);
			finish_conn(listener);
			return 1;
		}
		if (opt.verbose >= 1) {
			struct ib_ucm_attr_id_resp a;
			if (ucm_attr_id(listener->id, &a) == 0)
				logv(1, "listening: id %u service_id 0x%" PRIx64 " mask 0x%" PRIx64
					" local_id 0x%08x",
				     listener->id, be64toh(a.service_id), be64toh(a.service_mask),
				     be32toh(a.local_id));
			else
				errmsg("%s", cmd_err);
		}
		printf("listening on %s, service id 0x%" PRIx64 "%s\n", dev.path, opt.sid,
		       opt.no_verbs ? " (no verbs)" : "");
		fflush(stdout);
	}

	struct timespec t0, t1;
	long long busy0 = guest_busy_ticks();
	clock_gettime(CLOCK_MONOTONIC, &t0);
	int r = run_loop(total);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	long long busy1 = guest_busy_ticks();
	double wall = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;

	/* anything still live (error exit): tear down, ids first */
	for (struct conn *c = conns, *n; c; c = n) {
		n = c->next;
		if (c->role == ROLE_LISTENER)
			continue;
		if (!c->failed && c->st != X_DONE)
			conn_fail(c, "aborted");
		finish_conn(c);
	}
	if (listener) {
		listener->st = X_DONE;
		long reqs = listener->events;
		finish_conn(listener);
		logv(1, "listener took %ld REQ events", reqs);
	}
	if (r < 0)
		any_failure = 1;
	printf("%s: %ld of %ld connections ok\n", opt.server ? "server" : "client", ok_count,
	       opt.server ? finished - (listener ? 1 : 0) : total);
	/* test/perf reads these lines */
	if (opt.client && wall > 0) {
		printf("ucmclient-perf n=%ld parallel=%d msgs=%d verbs=%d libibcm=%d wall_s=%.4f conn_per_s=%.2f cmds=%ld"
		       " guest_cpu_us=%.1f",
		       total, opt.parallel, opt.msgs, !opt.no_verbs, opt.libibcm, wall, (double)ok_count / wall,
		       ucm_cmds, guest_cpu_us(busy0, busy1, (double)total));
		if (opt.burst && burst_s > 0)
			printf(" burst_connect_s=%.4f burst_conn_per_s=%.2f", burst_s, (double)ok_count / burst_s);
		printf("\n");
	}
	if (opt.server)
		printf("ucmclient-cmds n=%ld cmds=%ld\n", ok_count, ucm_cmds);
	if (opt.cmd_times)
		ct_report(opt.server ? "server" : "client");
	return any_failure || (opt.client && ok_count != total) ? 1 : 0;
}
