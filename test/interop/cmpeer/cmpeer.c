/*
 * cmpeer: the kernel-CM side of the interop tests (guest A). A small
 * librdmacm program whose every CM event is printed as one line, so that the
 * test in guest B can assert what the kernel application saw.
 *
 *   cmpeer server PORT accept|reject [PRIVATE_DATA [DELAY_MS [MSGS SIZE]]]
 *       listen on 0.0.0.0:PORT (RDMA_PS_TCP); for each connect request
 *       accept (a real RC QP) or reject (rdma_reject: REJ 28 with
 *       PRIVATE_DATA), after DELAY_MS (a slow application: rdma_cm's
 *       lazy MRA answers the peer's REQ retransmissions meanwhile); answer
 *       a disconnect with rdma_disconnect (DREP). Runs until killed.
 *   cmpeer userver PORT accept|reject [PRIVATE_DATA]
 *       the same in the UDP port space: a UD QP, SIDR_REQ → SIDR_REP
 *       (accept: success with the QPN and rdma_cm's Q_Key; reject: status 2).
 *   cmpeer uclient DST_IP PORT [PRIVATE_DATA]
 *       resolve a UD peer (SIDR_REQ); print the SIDR_REP's QPN and Q_Key
 *       (ESTABLISHED) or UNREACHABLE; exit 0 either way (the test judges).
 *   cmpeer client DST_IP PORT [PRIVATE_DATA [HOLD_MS [MSGS SIZE]]]
 *       connect; on ESTABLISHED wait HOLD_MS (default 300), disconnect
 *       (DREQ) and wait for DISCONNECTED. Exit 0 once the connection ended
 *       as the kernel reported it (established + disconnected, or rejected,
 *       which the test judges from the output); 1 on errors and timeouts.
 *
 * RC data (server with MSGS SIZE after DELAY_MS, client after HOLD_MS):
 * MSGS receives of SIZE bytes are posted before rdma_accept/rdma_connect.
 * The active side sends MSGS messages once established; the passive side
 * receives and checks all of them, then sends MSGS back, which the active
 * side checks before it disconnects. Byte j of message i is
 * (uint8_t)(dir * 0x80 + i * 31 + j * 7 + 1), dir 0 = active -> passive,
 * 1 = passive -> active (test/clients/ucmclient --rdma-cm uses the same).
 * Result line: "data ok recv=MSGS sent=MSGS size=SIZE", or "error data ...".
 *
 * Output lines: "t=<ms since start> <what> key=value ...", private data as
 * hex. Build: gcc -O2 -Wall -o cmpeer cmpeer.c -lrdmacm -libverbs
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

static struct timespec t0;

static long elapsed_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000;
}

static void say(const char *fmt, ...)
{
	va_list ap;

	printf("t=%ld ", elapsed_ms());
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
}

static void die(const char *what)
{
	say("error %s errno=%d (%s)", what, errno, strerror(errno));
	exit(1);
}

/* hex of the first n bytes of p, up to the last non-zero byte */
static const char *hex(const void *p, int n)
{
	static char buf[2 * 256 + 1];
	const unsigned char *b = p;
	int i, last = -1;

	if (!p)
		n = 0;
	for (i = 0; i < n; i++)
		if (b[i])
			last = i;
	for (i = 0; i <= last && i < 256; i++)
		sprintf(buf + 2 * i, "%02x", b[i]);
	buf[2 * (last + 1 < 256 ? last + 1 : 256)] = 0;
	if (last < 0)
		strcpy(buf, "-");
	return buf;
}

/* two buffers in turn: one printf may format two addresses */
static const char *addr_str(struct sockaddr *sa)
{
	static char bufs[2][INET6_ADDRSTRLEN + 8];
	static int turn;
	char *buf = bufs[turn ^= 1];
	char ip[INET6_ADDRSTRLEN] = "?";
	int port = 0;

	if (sa->sa_family == AF_INET) {
		struct sockaddr_in *s = (struct sockaddr_in *)sa;

		inet_ntop(AF_INET, &s->sin_addr, ip, sizeof(ip));
		port = ntohs(s->sin_port);
	} else if (sa->sa_family == AF_INET6) {
		struct sockaddr_in6 *s = (struct sockaddr_in6 *)sa;

		inet_ntop(AF_INET6, &s->sin6_addr, ip, sizeof(ip));
		port = ntohs(s->sin6_port);
	}
	snprintf(buf, sizeof(bufs[0]), "%s:%d", ip, port);
	return buf;
}

/* a real RC QP on the id's device, so the kernel side is a normal connection */
static void make_qp(struct rdma_cm_id *id, enum ibv_qp_type type, int msgs)
{
	struct ibv_qp_init_attr qa;
	struct ibv_pd *pd;
	struct ibv_cq *cq;

	pd = ibv_alloc_pd(id->verbs);
	if (!pd)
		die("ibv_alloc_pd");
	cq = ibv_create_cq(id->verbs, msgs > 0 ? 2 * msgs + 2 : 8, NULL, NULL, 0);
	if (!cq)
		die("ibv_create_cq");
	memset(&qa, 0, sizeof(qa));
	qa.send_cq = cq;
	qa.recv_cq = cq;
	qa.qp_type = type;
	qa.cap.max_send_wr = msgs > 4 ? msgs : 4;
	qa.cap.max_recv_wr = msgs > 4 ? msgs : 4;
	qa.cap.max_send_sge = 1;
	qa.cap.max_recv_sge = 1;
	if (rdma_create_qp(id, pd, &qa))
		die("rdma_create_qp");
	say("qp qpn=%u", id->qp->qp_num);
}

static void free_qp(struct rdma_cm_id *id)
{
	struct ibv_pd *pd;
	struct ibv_cq *cq;

	if (!id->qp)
		return;
	pd = id->qp->pd;
	cq = id->qp->send_cq;
	rdma_destroy_qp(id);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
}

/* ---- RC data (one data connection per process at a time) ---- */

static struct {
	struct ibv_mr *mr;
	unsigned char *buf;
	int msgs, size;
	int sent, recvd; /* completions so far */
} dat;

static unsigned char msg_byte(int dir, int seq, int j)
{
	return (unsigned char)(dir * 0x80 + seq * 31 + j * 7 + 1);
}

/* register the buffers and post MSGS receives (before accept/connect) */
static void data_setup(struct rdma_cm_id *id, int msgs, int size)
{
	int i;

	dat.msgs = msgs;
	dat.size = size;
	dat.buf = calloc(2 * (size_t)msgs, (size_t)size);
	if (!dat.buf)
		die("calloc");
	dat.mr = ibv_reg_mr(id->qp->pd, dat.buf, 2 * (size_t)msgs * size, IBV_ACCESS_LOCAL_WRITE);
	if (!dat.mr)
		die("ibv_reg_mr");
	for (i = 0; i < msgs; i++) {
		struct ibv_sge sge = { .addr = (uintptr_t)(dat.buf + (size_t)i * size),
				       .length = size, .lkey = dat.mr->lkey };
		struct ibv_recv_wr wr = { .wr_id = i, .sg_list = &sge, .num_sge = 1 }, *bad;

		errno = ibv_post_recv(id->qp, &wr, &bad);
		if (errno)
			die("ibv_post_recv");
	}
	say("data posted recvs=%d size=%d", msgs, size);
}

static void data_free(void)
{
	if (dat.mr)
		ibv_dereg_mr(dat.mr);
	free(dat.buf);
	memset(&dat, 0, sizeof(dat));
}

/* poll until `sends` send and `recvs` receive completions (in all) are in,
 * checking every received message against direction dir; 0 ok (30 s) */
static int data_poll(struct rdma_cm_id *id, int sends, int recvs, int dir)
{
	long until = elapsed_ms() + 30000;

	while (dat.sent < sends || dat.recvd < recvs) {
		struct ibv_wc wc;
		int r = ibv_poll_cq(id->qp->send_cq, 1, &wc);

		if (r < 0) {
			say("error data ibv_poll_cq=%d", r);
			return -1;
		}
		if (r == 0) {
			if (elapsed_ms() > until) {
				say("error data timeout sent=%d/%d recv=%d/%d", dat.sent, sends, dat.recvd,
				    recvs);
				return -1;
			}
			usleep(1000);
			continue;
		}
		if (wc.status != IBV_WC_SUCCESS) {
			say("error data wc status=%d (%s) opcode=%d", wc.status,
			    ibv_wc_status_str(wc.status), wc.opcode);
			return -1;
		}
		if (!(wc.opcode & IBV_WC_RECV)) {
			dat.sent++;
			continue;
		}
		unsigned char *p = dat.buf + (size_t)wc.wr_id * dat.size;
		int j, n = dat.recvd;

		if ((int)wc.wr_id != n || (int)wc.byte_len != dat.size) {
			say("error data message %d: wr_id=%d bytes=%u", n, (int)wc.wr_id, wc.byte_len);
			return -1;
		}
		for (j = 0; j < dat.size; j++)
			if (p[j] != msg_byte(dir, n, j)) {
				say("error data message %d byte %d is %#x, want %#x", n, j, p[j],
				    msg_byte(dir, n, j));
				return -1;
			}
		dat.recvd++;
	}
	return 0;
}

static int data_send(struct rdma_cm_id *id, int dir)
{
	int i, j;

	for (i = 0; i < dat.msgs; i++) {
		unsigned char *p = dat.buf + (size_t)(dat.msgs + i) * dat.size;
		struct ibv_sge sge = { .addr = (uintptr_t)p, .length = dat.size, .lkey = dat.mr->lkey };
		struct ibv_send_wr wr = { .wr_id = 1000 + i, .sg_list = &sge, .num_sge = 1,
					  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED }, *bad;

		for (j = 0; j < dat.size; j++)
			p[j] = msg_byte(dir, i, j);
		errno = ibv_post_send(id->qp, &wr, &bad);
		if (errno) {
			say("error data ibv_post_send errno=%d (%s)", errno, strerror(errno));
			return -1;
		}
	}
	return 0;
}

/* passive: all of the peer's messages, then as many back */
static void data_passive(struct rdma_cm_id *id)
{
	if (data_poll(id, 0, dat.msgs, 0) == 0 && data_send(id, 1) == 0 &&
	    data_poll(id, dat.msgs, dat.msgs, 0) == 0)
		say("data ok recv=%d sent=%d size=%d", dat.msgs, dat.msgs, dat.size);
}

/* active: ours, then the peer's replies */
static void data_active(struct rdma_cm_id *id)
{
	if (data_send(id, 0) == 0 && data_poll(id, dat.msgs, dat.msgs, 1) == 0)
		say("data ok recv=%d sent=%d size=%d", dat.msgs, dat.msgs, dat.size);
}

/* next event within timeout_ms (-1: forever); NULL on timeout */
static struct rdma_cm_event *next_event(struct rdma_event_channel *ch, int timeout_ms)
{
	struct rdma_cm_event *ev;
	struct pollfd pfd = { .fd = ch->fd, .events = POLLIN };
	int rc;

	rc = poll(&pfd, 1, timeout_ms);
	if (rc < 0)
		die("poll");
	if (rc == 0)
		return NULL;
	if (rdma_get_cm_event(ch, &ev))
		die("rdma_get_cm_event");
	return ev;
}

static void print_event(struct rdma_cm_event *ev)
{
	const void *pd = ev->param.conn.private_data;
	int len = ev->param.conn.private_data_len;

	if (ev->id->ps == RDMA_PS_UDP) {
		say("event %s status=%d id=%p qpn=%u qkey=%#x pd=%s", rdma_event_str(ev->event),
		    ev->status, (void *)ev->id, ev->param.ud.qp_num, ev->param.ud.qkey,
		    hex(ev->param.ud.private_data, ev->param.ud.private_data_len));
		return;
	}
	say("event %s status=%d id=%p pd=%s", rdma_event_str(ev->event), ev->status,
	    (void *)ev->id, hex(pd, len));
}

static int server(enum rdma_port_space ps, int port, int accept, const char *pdata, int delay_ms,
		  int msgs, int size)
{
	struct rdma_event_channel *ch;
	struct rdma_cm_id *lid;
	struct sockaddr_in sin;

	ch = rdma_create_event_channel();
	if (!ch)
		die("rdma_create_event_channel");
	if (rdma_create_id(ch, &lid, NULL, ps))
		die("rdma_create_id");
	memset(&sin, 0, sizeof(sin));
	sin.sin_family = AF_INET;
	sin.sin_port = htons(port);
	if (rdma_bind_addr(lid, (struct sockaddr *)&sin))
		die("rdma_bind_addr");
	if (rdma_listen(lid, 8))
		die("rdma_listen");
	say("listening port=%d mode=%s ps=%s", port, accept ? "accept" : "reject",
	    ps == RDMA_PS_UDP ? "udp" : "tcp");
	for (;;) {
		struct rdma_cm_event *ev = next_event(ch, -1);
		struct rdma_cm_id *id = ev->id;
		struct rdma_conn_param cp;

		print_event(ev);
		switch (ev->event) {
		case RDMA_CM_EVENT_CONNECT_REQUEST:
			say("request peer=%s local=%s rr=%d id=%d retry=%d rnr=%d",
			    addr_str(rdma_get_peer_addr(id)), addr_str(rdma_get_local_addr(id)),
			    ev->param.conn.responder_resources, ev->param.conn.initiator_depth,
			    ev->param.conn.retry_count, ev->param.conn.rnr_retry_count);
			rdma_ack_cm_event(ev);
			if (delay_ms > 0) {
				say("delaying ms=%d", delay_ms);
				usleep(delay_ms * 1000);
			}
			if (!accept) {
				if (rdma_reject(id, pdata, strlen(pdata)))
					die("rdma_reject");
				say("rejected id=%p", (void *)id);
				rdma_destroy_id(id);
				break;
			}
			make_qp(id, id->ps == RDMA_PS_UDP ? IBV_QPT_UD : IBV_QPT_RC, msgs);
			if (msgs > 0 && id->ps == RDMA_PS_TCP)
				data_setup(id, msgs, size);
			memset(&cp, 0, sizeof(cp));
			cp.responder_resources = 1;
			cp.initiator_depth = 1;
			cp.rnr_retry_count = 7;
			cp.private_data = pdata;
			cp.private_data_len = strlen(pdata);
			if (rdma_accept(id, &cp))
				die("rdma_accept");
			say("accepted id=%p qpn=%u", (void *)id, id->qp->qp_num);
			if (id->ps == RDMA_PS_UDP) { /* the SIDR_REP is out: done */
				free_qp(id);
				rdma_destroy_id(id);
				say("closed id=%p", (void *)id);
			} else if (dat.mr) {
				/* rdma_accept moved the QP to RTS: take the
				 * peer's messages and answer them (the
				 * ESTABLISHED event waits in the channel) */
				data_passive(id);
			}
			break;
		case RDMA_CM_EVENT_DISCONNECTED:
			rdma_ack_cm_event(ev);
			rdma_disconnect(id); /* answers the DREQ (DREP) */
			if (dat.mr && dat.mr->pd == id->qp->pd)
				data_free();
			free_qp(id);
			rdma_destroy_id(id);
			say("closed id=%p", (void *)id);
			break;
		case RDMA_CM_EVENT_ESTABLISHED:
			rdma_ack_cm_event(ev);
			break;
		case RDMA_CM_EVENT_CONNECT_ERROR:
		case RDMA_CM_EVENT_UNREACHABLE:
		case RDMA_CM_EVENT_REJECTED:
			rdma_ack_cm_event(ev);
			free_qp(id);
			rdma_destroy_id(id);
			say("closed id=%p", (void *)id);
			break;
		default:
			rdma_ack_cm_event(ev);
		}
	}
	return 0;
}

static struct rdma_cm_event *expect(struct rdma_event_channel *ch, enum rdma_cm_event_type want)
{
	struct rdma_cm_event *ev = next_event(ch, 60000);

	if (!ev) {
		say("error timeout waiting for %s", rdma_event_str(want));
		exit(1);
	}
	print_event(ev);
	if (ev->event != want && ev->event != RDMA_CM_EVENT_REJECTED) {
		say("error got %s, want %s", rdma_event_str(ev->event), rdma_event_str(want));
		exit(1);
	}
	return ev;
}

static int client(const char *dst, int port, const char *pdata, int hold_ms, int msgs, int size)
{
	struct rdma_event_channel *ch;
	struct rdma_cm_event *ev;
	struct rdma_cm_id *id;
	struct rdma_conn_param cp;
	struct sockaddr_in sin;
	long t;

	ch = rdma_create_event_channel();
	if (!ch)
		die("rdma_create_event_channel");
	if (rdma_create_id(ch, &id, NULL, RDMA_PS_TCP))
		die("rdma_create_id");
	memset(&sin, 0, sizeof(sin));
	sin.sin_family = AF_INET;
	sin.sin_port = htons(port);
	if (inet_pton(AF_INET, dst, &sin.sin_addr) != 1) {
		say("error bad address %s", dst);
		return 1;
	}
	if (rdma_resolve_addr(id, NULL, (struct sockaddr *)&sin, 5000))
		die("rdma_resolve_addr");
	ev = expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED);
	rdma_ack_cm_event(ev);
	if (rdma_resolve_route(id, 5000))
		die("rdma_resolve_route");
	ev = expect(ch, RDMA_CM_EVENT_ROUTE_RESOLVED);
	rdma_ack_cm_event(ev);
	make_qp(id, IBV_QPT_RC, msgs);
	if (msgs > 0)
		data_setup(id, msgs, size);
	memset(&cp, 0, sizeof(cp));
	cp.responder_resources = 1;
	cp.initiator_depth = 1;
	cp.retry_count = 7;
	cp.rnr_retry_count = 7;
	cp.private_data = pdata;
	cp.private_data_len = strlen(pdata);
	say("connect local=%s peer=%s", addr_str(rdma_get_local_addr(id)), addr_str(rdma_get_peer_addr(id)));
	if (rdma_connect(id, &cp))
		die("rdma_connect");
	ev = expect(ch, RDMA_CM_EVENT_ESTABLISHED);
	if (ev->event == RDMA_CM_EVENT_REJECTED) {
		say("rejected reason=%d pd=%s", ev->status,
		    hex(ev->param.conn.private_data, ev->param.conn.private_data_len));
		rdma_ack_cm_event(ev);
		free_qp(id);
		rdma_destroy_id(id);
		say("done");
		return 0;
	}
	rdma_ack_cm_event(ev);
	say("established");
	if (msgs > 0)
		data_active(id);
	usleep(hold_ms * 1000);
	t = elapsed_ms();
	if (rdma_disconnect(id)) /* sends the DREQ */
		die("rdma_disconnect");
	ev = expect(ch, RDMA_CM_EVENT_DISCONNECTED);
	rdma_ack_cm_event(ev);
	say("disconnected after_ms=%ld", elapsed_ms() - t);
	data_free();
	free_qp(id);
	rdma_destroy_id(id);
	rdma_destroy_event_channel(ch);
	say("done");
	return 0;
}

static int uclient(const char *dst, int port, const char *pdata)
{
	struct rdma_event_channel *ch;
	struct rdma_cm_event *ev;
	struct rdma_cm_id *id;
	struct rdma_conn_param cp;
	struct sockaddr_in sin;

	ch = rdma_create_event_channel();
	if (!ch)
		die("rdma_create_event_channel");
	if (rdma_create_id(ch, &id, NULL, RDMA_PS_UDP))
		die("rdma_create_id");
	memset(&sin, 0, sizeof(sin));
	sin.sin_family = AF_INET;
	sin.sin_port = htons(port);
	if (inet_pton(AF_INET, dst, &sin.sin_addr) != 1) {
		say("error bad address %s", dst);
		return 1;
	}
	if (rdma_resolve_addr(id, NULL, (struct sockaddr *)&sin, 5000))
		die("rdma_resolve_addr");
	ev = expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED);
	rdma_ack_cm_event(ev);
	if (rdma_resolve_route(id, 5000))
		die("rdma_resolve_route");
	ev = expect(ch, RDMA_CM_EVENT_ROUTE_RESOLVED);
	rdma_ack_cm_event(ev);
	make_qp(id, IBV_QPT_UD, 0);
	memset(&cp, 0, sizeof(cp));
	cp.private_data = pdata;
	cp.private_data_len = strlen(pdata);
	if (rdma_connect(id, &cp)) /* SIDR_REQ */
		die("rdma_connect");
	ev = next_event(ch, 60000);
	if (!ev) {
		say("error timeout waiting for the SIDR_REP");
		return 1;
	}
	print_event(ev);
	if (ev->event == RDMA_CM_EVENT_ESTABLISHED)
		say("resolved qpn=%u qkey=%#x", ev->param.ud.qp_num, ev->param.ud.qkey);
	else
		say("unresolved event=%s status=%d", rdma_event_str(ev->event), ev->status);
	rdma_ack_cm_event(ev);
	free_qp(id);
	rdma_destroy_id(id);
	rdma_destroy_event_channel(ch);
	say("done");
	return 0;
}

int main(int argc, char **argv)
{
	clock_gettime(CLOCK_MONOTONIC, &t0);
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc >= 4 && (!strcmp(argv[1], "server") || !strcmp(argv[1], "userver")) &&
	    (!strcmp(argv[3], "accept") || !strcmp(argv[3], "reject")))
		return server(argv[1][0] == 'u' ? RDMA_PS_UDP : RDMA_PS_TCP, atoi(argv[2]),
			      !strcmp(argv[3], "accept"), argc > 4 ? argv[4] : "",
			      argc > 5 ? atoi(argv[5]) : 0, argc > 7 ? atoi(argv[6]) : 0,
			      argc > 7 ? atoi(argv[7]) : 0);
	if (argc >= 4 && !strcmp(argv[1], "uclient"))
		return uclient(argv[2], atoi(argv[3]), argc > 4 ? argv[4] : "");
	if (argc >= 4 && !strcmp(argv[1], "client"))
		return client(argv[2], atoi(argv[3]), argc > 4 ? argv[4] : "",
			      argc > 5 ? atoi(argv[5]) : 300, argc > 7 ? atoi(argv[6]) : 0,
			      argc > 7 ? atoi(argv[7]) : 0);
	fprintf(stderr, "usage: cmpeer server|userver PORT accept|reject [PD [DELAY_MS [MSGS SIZE]]]\n"
			"       cmpeer client DST_IP PORT [PD [HOLD_MS [MSGS SIZE]]]\n"
			"       cmpeer uclient DST_IP PORT [PD]\n");
	return 2;
}
