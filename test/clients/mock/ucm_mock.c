/* SPDX-License-Identifier: MIT */
/*
 * ucm_mock.so — an LD_PRELOAD stand-in for /dev/infiniband/ucmN, for testing
 * ucmclient where neither ucmd nor a kernel ib_ucm is available.
 *
 * It is NOT a CM: no MADs, no retries, no timers. open("/dev/infiniband/ucm*")
 * returns the read end of a pipe; write() on it decodes the ucm ABI-5 command
 * (test/clients/ucm_abi.h), reads and writes the caller's buffers directly
 * (same process), and exchanges REQ/REP/RTU/DREQ/DREP datagrams with the peer
 * process over a UNIX datagram socket bound at $UCM_MOCK_DIR/p<pid>. A thread
 * drains that socket into a queue and writes one byte per message to the pipe;
 * local events (USER_ESTABLISHED, TIMEWAIT_EXIT, a REJ for a missing listener)
 * are queued the same way. So poll() on the fd works unchanged, O_NONBLOCK
 * set by the client applies to the pipe, and GET_EVENT is one byte + one
 * queued message. INIT_QP_ATTR answers with the kernel CM's masks and values
 * (docs/ib-cm.md §7), including a real AV (sgid_index found in
 * /sys/class/infiniband/<dev>/ports/<port>/gids), so RC QPs really connect
 * over rxe.
 *
 * Knobs (environment): UCM_MOCK_DIR (required), UCM_MOCK_NO_TIMEWAIT=1
 * (never send TIMEWAIT_EXIT), UCM_MOCK_BAD_REPORTED=1 (events_reported + 1),
 * UCM_MOCK_DROP_RTU=1 (RTUs never arrive: the passive side must NOTIFY),
 * UCM_MOCK_DROP_REP=1 (REPs never arrive: both sides must time out).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <pthread.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <arpa/inet.h>
#include <unistd.h>

#include "../ucm_abi.h"

enum { M_REQ = 1, M_REP, M_RTU, M_DREQ, M_DREP, M_LOCAL };
enum { S_IDLE, S_LISTEN, S_REQ_SENT, S_REQ_RCVD, S_REP_SENT, S_REP_RCVD, S_EST, S_DREQ_SENT,
       S_DREQ_RCVD, S_TIMEWAIT };

struct msg {
	uint32_t type;
	uint32_t src_comm, dst_comm;
	uint32_t local_event, local_id, local_arg;
	uint64_t sid;
	uint32_t qpn, psn;
	uint8_t rr, idepth, retry, rnr, len, mtu, hop;
	uint8_t sgid[16], dgid[16]; /* as the sender sees them */
	uint8_t pdata[224];
	char from[108];
};

#define MAXID 1024
static struct mid {
	int used;
	uint64_t uid;
	int state, active;
	uint64_t sid;
	uint32_t comm, rcomm;
	char peer[108];
	uint32_t qpn, psn, rqpn, rpsn;
	uint8_t rr, idepth, retry, rnr, mtu, hop;
	uint8_t sgid[16], dgid[16];
	uint32_t reported;
} ids[MAXID];

static int mfd = -1;		/* what the client holds: pipe read end */
static int pipe_w = -1;		/* one byte per queued message */
static int sock = -1;		/* bound datagram socket: receive */
static int ssock = -1;		/* unbound datagram socket: send (blocking) */
static char me[108];

struct qent {
	struct qent *next;
	struct msg m;
};
static struct qent *qhead, **qtail = &qhead;
static pthread_mutex_t qlock = PTHREAD_MUTEX_INITIALIZER;

static void enqueue(const struct msg *m)
{
	struct qent *e = malloc(sizeof(*e));
	if (!e)
		abort();
	e->m = *m;
	e->next = NULL;
	pthread_mutex_lock(&qlock);
	*qtail = e;
	qtail = &e->next;
	pthread_mutex_unlock(&qlock);
	char b = 1;
	while (write(pipe_w, &b, 1) < 0 && errno == EINTR)
		;
}

static int dequeue(struct msg *m)
{
	pthread_mutex_lock(&qlock);
	struct qent *e = qhead;
	if (e) {
		qhead = e->next;
		if (!qhead)
			qtail = &qhead;
	}
	pthread_mutex_unlock(&qlock);
	if (!e)
		return -1;
	*m = e->m;
	free(e);
	return 0;
}

static void *receiver(void *arg)
{
	(void)arg;
	for (;;) {
		struct msg m;
		ssize_t n = recv(sock, &m, sizeof(m), 0);
		if (n == (ssize_t)sizeof(m))
			enqueue(&m);
		else if (n < 0 && errno != EINTR)
			return NULL;
	}
}

static int (*real_open)(const char *, int, ...);
static ssize_t (*real_write)(int, const void *, size_t);

static void resolve(void)
{
	if (!real_open)
		real_open = (int (*)(const char *, int, ...))dlsym(RTLD_NEXT, "open");
	if (!real_write)
		real_write = (ssize_t(*)(int, const void *, size_t))dlsym(RTLD_NEXT, "write");
}

static int env1(const char *n)
{
	const char *v = getenv(n);
	return v && *v == '1';
}

static int mock_open(void)
{
	const char *dir = getenv("UCM_MOCK_DIR");
	if (!dir) {
		errno = ENOENT;
		return -1;
	}
	int p[2];
	sock = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	ssock = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (sock < 0 || ssock < 0 || pipe(p) < 0)
		return -1;
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	snprintf(me, sizeof(me), "%s/p%d", dir, (int)getpid());
	snprintf(a.sun_path, sizeof(a.sun_path), "%s", me);
	unlink(me);
	if (bind(sock, (struct sockaddr *)&a, sizeof(a)) < 0)
		return -1;
	pipe_w = p[1];
	mfd = p[0];
	pthread_t t;
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &old);
	int r = pthread_create(&t, NULL, receiver, NULL);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (r) {
		errno = r;
		return -1;
	}
	pthread_detach(t);
	return mfd;
}

static int is_ucm_path(const char *p)
{
	return p && strncmp(p, "/dev/infiniband/ucm", 19) == 0 && getenv("UCM_MOCK_DIR");
}

int open(const char *path, int flags, ...)
{
	resolve();
	mode_t mode = 0;
	if (flags & O_CREAT) {
		va_list ap;
		va_start(ap, flags);
		mode = (mode_t)va_arg(ap, int);
		va_end(ap);
	}
	if (is_ucm_path(path))
		return mock_open();
	return real_open(path, flags, mode);
}

int open64(const char *path, int flags, ...) __attribute__((alias("open")));

static int send_to(const char *to, const struct msg *m)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	snprintf(a.sun_path, sizeof(a.sun_path), "%s", to);
	struct msg c = *m;
	snprintf(c.from, sizeof(c.from), "%s", me);
	for (;;) {
		ssize_t n = sendto(ssock, &c, sizeof(c), 0, (struct sockaddr *)&a, sizeof(a));
		if (n == (ssize_t)sizeof(c))
			return 0;
		if (n < 0 && errno == EINTR)
			continue;
		return -1;
	}
}

/* A local event names its id by number and by the id's random comm id, so
 * that one queued for a destroyed id is dropped, not delivered to a new id
 * given the same number: the kernel dropped a destroyed id's events. */
static void local_event(uint32_t id, uint32_t ev, uint32_t arg)
{
	struct msg m = { .type = M_LOCAL, .local_event = ev, .local_id = id, .local_arg = arg,
			 .dst_comm = ids[id].comm };
	snprintf(m.from, sizeof(m.from), "%s", me);
	enqueue(&m);
}

static int alloc_id(void)
{
	for (int i = 0; i < MAXID; i++)
		if (!ids[i].used) {
			memset(&ids[i], 0, sizeof(ids[i]));
			ids[i].used = 1;
			ids[i].comm = ((uint32_t)getpid() << 12) ^ (uint32_t)i ^ (uint32_t)rand() << 20;
			return i;
		}
	return -1;
}

static struct mid *get(uint32_t id)
{
	if (id >= MAXID || !ids[id].used) {
		errno = ENOENT;
		return NULL;
	}
	return &ids[id];
}

static struct mid *by_comm(uint32_t comm, int *idx)
{
	for (int i = 0; i < MAXID; i++)
		if (ids[i].used && ids[i].comm == comm) {
			*idx = i;
			return &ids[i];
		}
	return NULL;
}

/* sgid_index: position of gid in /sys/class/infiniband/<any dev>/ports/1/gids */
static int gid_index(const uint8_t *gid)
{
	DIR *d = opendir("/sys/class/infiniband");
	struct dirent *e;
	int found = -1;
	if (!d)
		return 0;
	while (found < 0 && (e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		for (int i = 0; i < 16 && found < 0; i++) {
			char p[512], buf[64];
			snprintf(p, sizeof(p), "/sys/class/infiniband/%s/ports/1/gids/%d", e->d_name, i);
			int fd = real_open(p, O_RDONLY);
			if (fd < 0)
				break;
			ssize_t n = read(fd, buf, sizeof(buf) - 1);
			close(fd);
			if (n <= 0)
				continue;
			buf[n] = 0;
			char *nl = strchr(buf, '\n');
			if (nl)
				*nl = 0;
			uint8_t g[16];
			if (inet_pton(AF_INET6, buf, g) == 1 && !memcmp(g, gid, 16))
				found = i;
		}
	}
	closedir(d);
	return found < 0 ? 0 : found;
}

#define EV_DATA(m, n) do { memcpy(data, (m)->pdata, (n)); dlen = (n); pres |= IB_UCM_PRES_DATA; } while (0)

/* GET_EVENT: one datagram -> one event (messages for gone ids are dropped). */
static int get_event(const struct ib_ucm_event_get *cmd, uint16_t out)
{
	if (out < sizeof(struct ib_ucm_event_resp))
		return -ENOSPC;
	for (;;) {
		struct msg m;
		char b;
		ssize_t n = read(mfd, &b, 1); /* blocks unless the client set O_NONBLOCK */
		if (n < 0)
			return -errno;
		if (n == 0 || dequeue(&m))
			continue;
		struct ib_ucm_event_resp r;
		uint8_t data[224];
		size_t dlen = 0;
		uint32_t pres = 0;
		struct mid *x = NULL, *count = NULL;
		int idx = -1;
		memset(&r, 0, sizeof(r));
		memset(data, 0, sizeof(data));
		switch (m.type) {
		case M_REQ: {
			struct mid *l = NULL;
			for (int i = 0; i < MAXID; i++)
				if (ids[i].used && ids[i].state == S_LISTEN && ids[i].sid == m.sid)
					l = &ids[i];
			if (!l)
				continue;
			idx = alloc_id();
			x = &ids[idx];
			x->state = S_REQ_RCVD;
			x->rcomm = m.src_comm;
			snprintf(x->peer, sizeof(x->peer), "%s", m.from);
			x->rqpn = m.qpn;
			x->rpsn = m.psn;
			x->retry = m.retry;
			x->rnr = m.rnr;
			x->mtu = m.mtu;
			x->hop = m.hop;
			memcpy(x->sgid, m.dgid, 16);
			memcpy(x->dgid, m.sgid, 16);
			r.uid = l->uid;
			r.event = IB_CM_REQ_RECEIVED;
			struct ib_ucm_req_event_resp *q = &r.u.req_resp;
			memcpy(q->primary_path.dgid, m.sgid, 16);
			memcpy(q->primary_path.sgid, m.dgid, 16);
			q->primary_path.pkey = htobe16(0xffff);
			q->primary_path.mtu = m.mtu;
			q->primary_path.hop_limit = m.hop;
			q->remote_qpn = m.qpn;
			q->starting_psn = m.psn;
			q->qp_type = UCM_QPT_RC;
			q->responder_resources = m.idepth;
			q->initiator_depth = m.rr;
			q->retry_count = m.retry;
			q->rnr_retry_count = m.rnr;
			q->port = 1;
			pres |= IB_UCM_PRES_PRIMARY;
			EV_DATA(&m, UCM_REQ_PDATA);
			count = l;
			break;
		}
		case M_LOCAL:
			x = get(m.local_id);
			if (!x || x->comm != m.dst_comm)
				continue;
			idx = (int)m.local_id;
			r.event = m.local_event;
			if (m.local_event == IB_CM_REJ_RECEIVED) {
				r.u.rej_resp.reason = m.local_arg;
				EV_DATA(&m, UCM_REJ_PDATA);
				x->state = S_IDLE;
			}
			break;
		default:
			x = by_comm(m.dst_comm, &idx);
			if (!x)
				continue;
			switch (m.type) {
			case M_REP:
				if (x->state != S_REQ_SENT)
					continue;
				x->state = S_REP_RCVD;
				x->rcomm = m.src_comm;
				snprintf(x->peer, sizeof(x->peer), "%s", m.from);
				x->rqpn = m.qpn;
				x->rpsn = m.psn;
				x->rnr = m.rnr;
				x->rr = m.idepth; /* negotiated, as the kernel CM records it */
				x->idepth = m.rr;
				r.event = IB_CM_REP_RECEIVED;
				r.u.rep_resp.remote_qpn = m.qpn;
				r.u.rep_resp.starting_psn = m.psn;
				r.u.rep_resp.responder_resources = m.idepth;
				r.u.rep_resp.initiator_depth = m.rr;
				r.u.rep_resp.rnr_retry_count = m.rnr;
				EV_DATA(&m, UCM_REP_PDATA);
				break;
			case M_RTU:
				if (x->state != S_REP_SENT)
					continue;
				x->state = S_EST;
				r.event = IB_CM_RTU_RECEIVED;
				EV_DATA(&m, UCM_RTU_PDATA);
				break;
			case M_DREQ:
				if (x->state != S_EST && x->state != S_REP_SENT)
					continue;
				x->state = S_DREQ_RCVD;
				r.event = IB_CM_DREQ_RECEIVED;
				EV_DATA(&m, UCM_DREQ_PDATA);
				break;
			case M_DREP:
				if (x->state != S_DREQ_SENT)
					continue;
				x->state = S_TIMEWAIT;
				r.event = IB_CM_DREP_RECEIVED;
				EV_DATA(&m, UCM_DREP_PDATA);
				if (!env1("UCM_MOCK_NO_TIMEWAIT"))
					local_event((uint32_t)idx, IB_CM_TIMEWAIT_EXIT, 0);
				break;
			default:
				continue;
			}
			r.uid = x->uid;
		}
		if (m.type == M_LOCAL)
			r.uid = x->uid;
		r.id = (uint32_t)idx;
		r.present = pres;
		if (dlen > cmd->data_len)
			return -ENOMEM;
		memcpy((void *)(uintptr_t)cmd->response, &r, sizeof(r));
		if (dlen)
			memcpy((void *)(uintptr_t)cmd->data, data, dlen);
		(count ? count : x)->reported++;
		return 0;
	}
}

static void fill_ah(struct ucm_uverbs_ah_attr *ah, struct mid *x)
{
	memcpy(ah->grh.dgid, x->dgid, 16);
	ah->grh.sgid_index = (uint8_t)gid_index(x->sgid);
	ah->grh.hop_limit = x->hop ? x->hop : 64;
	ah->is_global = 1;
	ah->port_num = 1;
	ah->static_rate = 0;
}

static int init_qp_attr(const struct ib_ucm_init_qp_attr *c)
{
	struct mid *x = get(c->id);
	if (!x)
		return -ENOENT;
	struct ucm_uverbs_qp_attr a;
	memset(&a, 0, sizeof(a));
	a.qp_state = c->qp_state;
	int est_like = x->state >= S_REQ_RCVD && x->state <= S_EST;
	switch (c->qp_state) {
	case UCM_QPS_INIT:
		if (!est_like && x->state != S_REQ_SENT)
			return -EINVAL;
		a.qp_attr_mask = UCM_QP_STATE | UCM_QP_ACCESS_FLAGS | UCM_QP_PKEY_INDEX | UCM_QP_PORT;
		a.qp_access_flags = 2 | 4 | 8;
		a.port_num = 1;
		break;
	case UCM_QPS_RTR:
		if (!est_like)
			return -EINVAL;
		a.qp_attr_mask = UCM_QP_STATE | UCM_QP_AV | UCM_QP_PATH_MTU | UCM_QP_DEST_QPN |
				 UCM_QP_RQ_PSN | UCM_QP_MAX_DEST_RD_ATOMIC | UCM_QP_MIN_RNR_TIMER;
		fill_ah(&a.ah_attr, x);
		a.path_mtu = x->mtu;
		a.dest_qp_num = x->rqpn;
		a.rq_psn = x->psn;
		a.max_dest_rd_atomic = x->rr;
		a.min_rnr_timer = 0;
		break;
	case UCM_QPS_RTS:
		if (!est_like)
			return -EINVAL;
		a.qp_attr_mask = UCM_QP_STATE | UCM_QP_SQ_PSN | UCM_QP_TIMEOUT | UCM_QP_RETRY_CNT |
				 UCM_QP_RNR_RETRY | UCM_QP_MAX_QP_RD_ATOMIC;
		a.sq_psn = x->rpsn;
		a.timeout = 14;
		a.retry_cnt = x->retry;
		a.rnr_retry = x->rnr;
		a.max_rd_atomic = x->idepth;
		break;
	default:
		return -EINVAL;
	}
	memcpy((void *)(uintptr_t)c->response, &a, sizeof(a));
	return 0;
}

static int listen_file(uint64_t sid, char *path, size_t cap)
{
	return snprintf(path, cap, "%s/listen-%llx", getenv("UCM_MOCK_DIR"), (unsigned long long)sid);
}

static int do_cmd(const uint8_t *buf, size_t len)
{
	struct ib_ucm_cmd_hdr h;
	if (len < sizeof(h))
		return -EINVAL;
	memcpy(&h, buf, sizeof(h));
	if (h.cmd >= IB_USER_CM_CMD_COUNT || h.in + sizeof(h) > len)
		return -EINVAL;
	const void *p = buf + sizeof(h);
	struct msg m;
	memset(&m, 0, sizeof(m));
	struct mid *x;
	switch (h.cmd) {
	case IB_USER_CM_CMD_CREATE_ID: {
		const struct ib_ucm_create_id *c = p;
		int i = alloc_id();
		if (i < 0)
			return -ENOMEM;
		ids[i].uid = c->uid;
		struct ib_ucm_create_id_resp r = { .id = (uint32_t)i };
		memcpy((void *)(uintptr_t)c->response, &r, sizeof(r));
		return 0;
	}
	case IB_USER_CM_CMD_DESTROY_ID: {
		const struct ib_ucm_destroy_id *c = p;
		if (!(x = get(c->id)))
			return -ENOENT;
		if (x->state == S_LISTEN) {
			char lf[256];
			listen_file(x->sid, lf, sizeof(lf));
			unlink(lf);
		}
		struct ib_ucm_destroy_id_resp r = { .events_reported = x->reported +
								       (env1("UCM_MOCK_BAD_REPORTED") ? 1 : 0) };
		x->used = 0;
		memcpy((void *)(uintptr_t)c->response, &r, sizeof(r));
		return 0;
	}
	case IB_USER_CM_CMD_ATTR_ID: {
		const struct ib_ucm_attr_id *c = p;
		if (!(x = get(c->id)))
			return -ENOENT;
		struct ib_ucm_attr_id_resp r = { .service_id = htobe64(x->sid), .service_mask = ~0ULL,
						 .local_id = htobe32(x->comm), .remote_id = htobe32(x->rcomm) };
		memcpy((void *)(uintptr_t)c->response, &r, sizeof(r));
		return 0;
	}
	case IB_USER_CM_CMD_LISTEN: {
		const struct ib_ucm_listen *c = p;
		if (!(x = get(c->id)))
			return -ENOENT;
		if (x->state != S_IDLE)
			return -EINVAL;
		x->sid = be64toh(c->service_id);
		x->state = S_LISTEN;
		char lf[256];
		listen_file(x->sid, lf, sizeof(lf));
		FILE *f = fopen(lf, "w");
		if (!f)
			return -EIO;
		fprintf(f, "%s\n", me);
		fclose(f);
		return 0;
	}
	case IB_USER_CM_CMD_NOTIFY: {
		const struct ib_ucm_notify *c = p;
		if (!(x = get(c->id)))
			return -ENOENT;
		if (c->event != UCM_EVENT_COMM_EST)
			return -EINVAL;
		if (x->state == S_EST)
			return -EISCONN;
		if (x->state != S_REP_SENT)
			return -EINVAL;
		x->state = S_EST;
		local_event(c->id, IB_CM_USER_ESTABLISHED, 0);
		return 0;
	}
	case IB_USER_CM_CMD_SEND_REQ: {
		const struct ib_ucm_req *c = p;
		if (!c->primary_path)
			return -EINVAL;
		if (!(x = get(c->id)))
			return -ENOENT;
		if (x->state != S_IDLE || c->len > UCM_REQ_PDATA || c->peer_to_peer)
			return -EINVAL;
		const struct ucm_user_path_rec *pr = (const void *)(uintptr_t)c->primary_path;
		x->sid = be64toh(c->sid);
		x->active = 1;
		x->qpn = c->qpn;
		x->psn = c->psn;
		x->retry = c->retry_count;
		x->mtu = (uint8_t)pr->mtu;
		x->hop = pr->hop_limit;
		memcpy(x->sgid, pr->sgid, 16);
		memcpy(x->dgid, pr->dgid, 16);
		x->state = S_REQ_SENT;
		char lf[256], peer[108] = "";
		listen_file(x->sid, lf, sizeof(lf));
		FILE *f = fopen(lf, "r");
		if (!f || !fgets(peer, sizeof(peer), f)) {
			if (f)
				fclose(f);
			local_event(c->id, IB_CM_REJ_RECEIVED, 8); /* invalid service id */
			return 0;
		}
		fclose(f);
		peer[strcspn(peer, "\n")] = 0;
		m.type = M_REQ;
		m.src_comm = x->comm;
		m.sid = x->sid;
		m.qpn = c->qpn;
		m.psn = c->psn;
		m.rr = c->responder_resources;
		m.idepth = c->initiator_depth;
		m.retry = c->retry_count;
		m.rnr = c->rnr_retry_count;
		m.mtu = (uint8_t)pr->mtu;
		m.hop = pr->hop_limit;
		memcpy(m.sgid, pr->sgid, 16);
		memcpy(m.dgid, pr->dgid, 16);
		if (c->len)
			memcpy(m.pdata, (const void *)(uintptr_t)c->data, c->len);
		return send_to(peer, &m) ? -errno : 0;
	}
	case IB_USER_CM_CMD_SEND_REP: {
		const struct ib_ucm_rep *c = p;
		if (!(x = get(c->id)))
			return -ENOENT;
		if (x->state != S_REQ_RCVD || c->len > UCM_REP_PDATA)
			return -EINVAL;
		x->uid = c->uid;
		x->qpn = c->qpn;
		x->psn = c->psn;
		x->rr = c->responder_resources;
		x->idepth = c->initiator_depth;
		x->state = S_REP_SENT;
		m.type = M_REP;
		m.src_comm = x->comm;
		m.dst_comm = x->rcomm;
		m.qpn = c->qpn;
		m.psn = c->psn;
		m.rr = c->responder_resources;
		m.idepth = c->initiator_depth;
		m.rnr = c->rnr_retry_count;
		if (c->len)
			memcpy(m.pdata, (const void *)(uintptr_t)c->data, c->len);
		if (env1("UCM_MOCK_DROP_REP"))
			return 0;
		return send_to(x->peer, &m) ? -errno : 0;
	}
	case IB_USER_CM_CMD_SEND_RTU:
	case IB_USER_CM_CMD_SEND_DREQ:
	case IB_USER_CM_CMD_SEND_DREP: {
		const struct ib_ucm_private_data *c = p;
		if (!(x = get(c->id)))
			return -ENOENT;
		int need = h.cmd == IB_USER_CM_CMD_SEND_RTU ? S_REP_RCVD
			   : h.cmd == IB_USER_CM_CMD_SEND_DREQ ? S_EST
							       : S_DREQ_RCVD;
		if (x->state != need)
			return -EINVAL;
		m.type = h.cmd == IB_USER_CM_CMD_SEND_RTU ? M_RTU : h.cmd == IB_USER_CM_CMD_SEND_DREQ ? M_DREQ : M_DREP;
		x->state = h.cmd == IB_USER_CM_CMD_SEND_RTU ? S_EST : h.cmd == IB_USER_CM_CMD_SEND_DREQ ? S_DREQ_SENT : S_TIMEWAIT;
		m.src_comm = x->comm;
		m.dst_comm = x->rcomm;
		if (c->len)
			memcpy(m.pdata, (const void *)(uintptr_t)c->data, c->len);
		if (m.type == M_RTU && env1("UCM_MOCK_DROP_RTU"))
			return 0;
		if (send_to(x->peer, &m))
			return -errno;
		if (m.type == M_DREP && !env1("UCM_MOCK_NO_TIMEWAIT"))
			local_event(c->id, IB_CM_TIMEWAIT_EXIT, 0);
		return 0;
	}
	case IB_USER_CM_CMD_EVENT:
		return get_event(p, h.out);
	case IB_USER_CM_CMD_INIT_QP_ATTR:
		if (h.out < sizeof(struct ucm_uverbs_qp_attr))
			return -ENOSPC;
		return init_qp_attr(p);
	default:
		return -EINVAL;
	}
}

ssize_t write(int fd, const void *buf, size_t len)
{
	resolve();
	if (fd < 0 || fd != mfd)
		return real_write(fd, buf, len);
	int r = do_cmd(buf, len);
	if (r < 0) {
		errno = -r;
		return -1;
	}
	return (ssize_t)len;
}
