/* SPDX-License-Identifier: MIT */
/*
 * rdmaconn — the kernel's connection rate (rdma_cm over ib_cm), the anchor
 * that ucmd's connection figures are divided by (issue 13, docs/perf.md).
 *
 *   server: rdmaconn -l ADDR [-q] [-p PORT]
 *   client: rdmaconn -s DST -b SRC [-n N] [-w W] [-H] [-q] [-W WARMUP] [-L LABEL] [-p PORT]
 *
 * One RC connection's whole life per round, as an application sees it:
 * create_id, resolve_addr, resolve_route, (create_qp), connect until
 * ESTABLISHED, disconnect until DISCONNECTED, (destroy the QP), destroy_id.
 * At most W connections are in flight (-w 1: strictly one at a time); -H
 * (with -w W) starts W at once, holds each until all W are ESTABLISHED,
 * then disconnects them all: a burst, reported as its connect rate.
 * -q gives every connection an RC QP on both sides (a shared PD and CQ);
 * without it the CM runs alone (the QPN in REQ/REP is made up). No data
 * moves either way. The server accepts every REQ and answers a DREQ with
 * rdma_disconnect; it runs until killed.
 *
 * Addresses: IPv6 link-local with a scope id (fe80::...%veth0) or IPv4.
 * Output: one line of key=value pairs (test/perf/summarize reads it).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <netdb.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <rdma/rdma_cma.h>

#include "guestcpu.h"

static int use_qp;
static struct rdma_event_channel *ch;
static struct ibv_pd *pd;
static struct ibv_cq *cq;

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void die(const char *what, int e)
{
	fprintf(stderr, "rdmaconn: %s: %s\n", what, strerror(e));
	exit(1);
}

static const char *port = "7471";

static void resolve(const char *s, const char *service, struct sockaddr_storage *ss)
{
	struct addrinfo hints = { .ai_flags = AI_NUMERICHOST | AI_NUMERICSERV }, *ai;
	int r = getaddrinfo(s, service, &hints, &ai);
	if (r) {
		fprintf(stderr, "rdmaconn: address %s: %s\n", s, gai_strerror(r));
		exit(2);
	}
	memcpy(ss, ai->ai_addr, ai->ai_addrlen);
	freeaddrinfo(ai);
}

/* setup_qp gives id an RC QP on the shared PD/CQ (made on first use). */
static void setup_qp(struct rdma_cm_id *id)
{
	if (!pd) {
		if (!(pd = ibv_alloc_pd(id->verbs)))
			die("ibv_alloc_pd", errno);
		if (!(cq = ibv_create_cq(id->verbs, 256, NULL, NULL, 0)))
			die("ibv_create_cq", errno);
	}
	struct ibv_qp_init_attr a = {
		.send_cq = cq,
		.recv_cq = cq,
		.qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1 },
	};
	if (rdma_create_qp(id, pd, &a))
		die("rdma_create_qp", errno);
}

static struct rdma_conn_param conn_param(void)
{
	struct rdma_conn_param p = {
		.responder_resources = 1,
		.initiator_depth = 1,
		.retry_count = 5,
		.rnr_retry_count = 6,
	};
	/* no QP: the CM only. Each connection needs its own made-up QPN: the
	 * CM rejects a REQ whose (QPN, CA GUID) is already connected (stale) */
	static uint32_t fake_qpn = 0x100;
	if (!use_qp)
		p.qp_num = fake_qpn++ & 0xffffff;
	return p;
}

static void drop(struct rdma_cm_id *id)
{
	if (id->qp)
		rdma_destroy_qp(id);
	if (rdma_destroy_id(id))
		die("rdma_destroy_id", errno);
}

static _Noreturn void serve(const char *addr)
{
	struct sockaddr_storage ss;
	struct rdma_cm_id *lid;
	resolve(addr, port, &ss);
	if (rdma_create_id(ch, &lid, NULL, RDMA_PS_TCP))
		die("rdma_create_id", errno);
	if (rdma_bind_addr(lid, (struct sockaddr *)&ss))
		die("rdma_bind_addr", errno);
	if (rdma_listen(lid, 1024))
		die("rdma_listen", errno);
	printf("rdmaconn: listening on %s%s\n", addr, use_qp ? " (QPs)" : "");
	fflush(stdout);
	for (;;) {
		struct rdma_cm_event *ev;
		if (rdma_get_cm_event(ch, &ev))
			die("rdma_get_cm_event", errno);
		struct rdma_cm_id *id = ev->id;
		enum rdma_cm_event_type t = ev->event;
		rdma_ack_cm_event(ev);
		switch (t) {
		case RDMA_CM_EVENT_CONNECT_REQUEST: {
			if (use_qp)
				setup_qp(id);
			struct rdma_conn_param p = conn_param();
			if (rdma_accept(id, &p))
				die("rdma_accept", errno);
			break;
		}
		case RDMA_CM_EVENT_ESTABLISHED:
			break;
		case RDMA_CM_EVENT_DISCONNECTED:
			rdma_disconnect(id);
			drop(id);
			break;
		default:
			fprintf(stderr, "rdmaconn: server: unexpected %s\n", rdma_event_str(t));
			drop(id);
		}
	}
}

/* ------------------------------------------------------------------------ */
/* Client                                                                   */

enum phase { P_ADDR, P_ROUTE, P_CONNECT, P_HELD, P_DISCONNECT };

struct conn {
	struct rdma_cm_id *id;
	enum phase ph;
};

static struct sockaddr_storage src, dst;
static long started, finished, established;
static int inflight, burst, window = 1;

static void start(void)
{
	struct conn *c = calloc(1, sizeof(*c));
	if (!c)
		die("calloc", ENOMEM);
	if (rdma_create_id(ch, &c->id, c, RDMA_PS_TCP))
		die("rdma_create_id", errno);
	if (rdma_resolve_addr(c->id, (struct sockaddr *)&src, (struct sockaddr *)&dst, 5000))
		die("rdma_resolve_addr", errno);
	c->ph = P_ADDR;
	started++;
	inflight++;
}

static void disconnect(struct conn *c)
{
	c->ph = P_DISCONNECT;
	if (rdma_disconnect(c->id))
		die("rdma_disconnect", errno);
}

/* run_round connects n connections, at most window in flight; it returns
 * the time from the first start to the moment the last was ESTABLISHED
 * (the burst's connect time) through *connect_s. */
static double run_round(long n, double *connect_s)
{
	static struct conn *held[4096];
	int nheld = 0;
	started = finished = established = 0;
	double t0 = now_s(), t_est = 0;
	while (finished < n) {
		while (started < n && inflight < window && (!burst || started - finished < window))
			start();
		struct rdma_cm_event *ev;
		if (rdma_get_cm_event(ch, &ev))
			die("rdma_get_cm_event", errno);
		struct conn *c = ev->id->context;
		enum rdma_cm_event_type t = ev->event;
		int status = ev->status;
		rdma_ack_cm_event(ev);
		switch (t) {
		case RDMA_CM_EVENT_ADDR_RESOLVED:
			c->ph = P_ROUTE;
			if (rdma_resolve_route(c->id, 5000))
				die("rdma_resolve_route", errno);
			break;
		case RDMA_CM_EVENT_ROUTE_RESOLVED: {
			if (use_qp)
				setup_qp(c->id);
			struct rdma_conn_param p = conn_param();
			c->ph = P_CONNECT;
			if (rdma_connect(c->id, &p))
				die("rdma_connect", errno);
			break;
		}
		case RDMA_CM_EVENT_CONNECT_RESPONSE:
			/* no QP: the REP is the application's to complete (RTU) */
			if (rdma_establish(c->id))
				die("rdma_establish", errno);
			/* fall through */
		case RDMA_CM_EVENT_ESTABLISHED:
			established++;
			if (!burst) {
				disconnect(c);
				break;
			}
			c->ph = P_HELD;
			held[nheld++] = c;
			if (nheld == window || established == n) {
				t_est = now_s();
				for (int i = 0; i < nheld; i++)
					disconnect(held[i]);
				nheld = 0;
			}
			break;
		case RDMA_CM_EVENT_DISCONNECTED:
			drop(c->id);
			free(c);
			inflight--;
			finished++;
			break;
		default:
			fprintf(stderr, "rdmaconn: client: %s (status %d) in phase %d\n", rdma_event_str(t),
				status, c->ph);
			exit(1);
		}
	}
	if (connect_s)
		*connect_s = t_est - t0;
	return now_s() - t0;
}

int main(int argc, char **argv)
{
	const char *listen = NULL, *dsts = NULL, *srcs = NULL, *label = "run";
	long n = 200, warm = 3;
	int opt;
	while ((opt = getopt(argc, argv, "l:s:b:n:w:HqW:L:p:")) != -1) {
		switch (opt) {
		case 'l': listen = optarg; break;
		case 's': dsts = optarg; break;
		case 'b': srcs = optarg; break;
		case 'n': n = atol(optarg); break;
		case 'w': window = atoi(optarg); break;
		case 'H': burst = 1; break;
		case 'q': use_qp = 1; break;
		case 'W': warm = atol(optarg); break;
		case 'L': label = optarg; break;
		case 'p': port = optarg; break;
		default:
			fprintf(stderr, "usage: rdmaconn -l ADDR [-q] [-p PORT] | -s DST -b SRC [-n N] [-w W] [-H] [-q] [-W WARMUP] [-L LABEL] [-p PORT]\n");
			return 2;
		}
	}
	if (window < 1 || window > 4096 || n < 1) {
		fprintf(stderr, "rdmaconn: -w 1..4096, -n >= 1\n");
		return 2;
	}
	if (!(ch = rdma_create_event_channel()))
		die("rdma_create_event_channel", errno);
	if (listen)
		serve(listen);
	if (!dsts || !srcs) {
		fprintf(stderr, "rdmaconn: the client needs -s DST and -b SRC\n");
		return 2;
	}
	resolve(dsts, port, &dst);
	resolve(srcs, NULL, &src);
	if (warm > 0) {
		int w = window, b = burst;
		window = 1, burst = 0;
		run_round(warm, NULL);
		window = w, burst = b;
	}
	long long busy0 = guest_busy_ticks();
	double connect_s = 0, wall = run_round(n, &connect_s);
	long long busy1 = guest_busy_ticks();
	printf("rdmaconn label=%s qp=%d window=%d burst=%d n=%ld wall_s=%.4f conn_per_s=%.2f guest_cpu_us=%.1f",
	       label, use_qp, window, burst, n, wall, (double)n / wall, guest_cpu_us(busy0, busy1, (double)n));
	if (burst)
		printf(" burst_connect_s=%.4f burst_conn_per_s=%.2f", connect_s, (double)n / connect_s);
	printf("\n");
	return 0;
}
