/* SPDX-License-Identifier: MIT */
/*
 * ucm_abi.h — our own definitions of the legacy /dev/infiniband/ucmN
 * write() ABI (ib_ucm, IB_USER_CM_ABI_VERSION 5), as libibcm spoke it.
 *
 * Written from the layout tables in docs/ucm-abi.md §2 (sizes and offsets
 * checked against the last kernel header with gcc for -m64 and -m32). No
 * kernel or libibcm text is reused; every size and key offset is pinned with
 * _Static_assert at the bottom of this file, so a wrong field breaks the
 * build instead of the wire format.
 *
 * Byte order: fields marked "be" carry network order, everything else host
 * order. Pointers travel as 64-bit integers (zero-extended on 32-bit).
 *
 * The two structs shared with uverbs / the SA (ib_uverbs_qp_attr,
 * ib_user_path_rec) are named ucm_uverbs_qp_attr / ucm_user_path_rec here,
 * because <infiniband/verbs.h> already pulls in <rdma/ib_user_verbs.h>.
 */
#ifndef UCMCLIENT_UCM_ABI_H
#define UCMCLIENT_UCM_ABI_H

#include <stddef.h>
#include <stdint.h>

#define UCM_ABI_VERSION 5     /* what the final kernel reported */
#define UCM_MIN_ABI_VERSION 4 /* what libibcm accepted */
#define UCM_MAX_ABI_VERSION 5

/* __aligned_u64 of the final UAPI header: same offsets on i386 and x86_64. */
typedef uint64_t ucm_u64 __attribute__((aligned(8)));

/* Command numbers: index into the kernel's ucm_cmd_table (18 entries). */
enum {
	IB_USER_CM_CMD_CREATE_ID = 0,
	IB_USER_CM_CMD_DESTROY_ID = 1,
	IB_USER_CM_CMD_ATTR_ID = 2,
	IB_USER_CM_CMD_LISTEN = 3,
	IB_USER_CM_CMD_NOTIFY = 4, /* ABI <= 4: ESTABLISH, struct {u32 id} */
	IB_USER_CM_CMD_SEND_REQ = 5,
	IB_USER_CM_CMD_SEND_REP = 6,
	IB_USER_CM_CMD_SEND_RTU = 7,
	IB_USER_CM_CMD_SEND_DREQ = 8,
	IB_USER_CM_CMD_SEND_DREP = 9,
	IB_USER_CM_CMD_SEND_REJ = 10,
	IB_USER_CM_CMD_SEND_MRA = 11,
	IB_USER_CM_CMD_SEND_LAP = 12,
	IB_USER_CM_CMD_SEND_APR = 13,
	IB_USER_CM_CMD_SEND_SIDR_REQ = 14,
	IB_USER_CM_CMD_SEND_SIDR_REP = 15,
	IB_USER_CM_CMD_EVENT = 16,
	IB_USER_CM_CMD_INIT_QP_ATTR = 17,
	IB_USER_CM_CMD_COUNT = 18,
};

/* enum ib_cm_event_type (kernel and libibcm agree). */
enum {
	IB_CM_REQ_ERROR = 0,
	IB_CM_REQ_RECEIVED = 1,
	IB_CM_REP_ERROR = 2,
	IB_CM_REP_RECEIVED = 3,
	IB_CM_RTU_RECEIVED = 4,
	IB_CM_USER_ESTABLISHED = 5,
	IB_CM_DREQ_ERROR = 6,
	IB_CM_DREQ_RECEIVED = 7,
	IB_CM_DREP_RECEIVED = 8,
	IB_CM_TIMEWAIT_EXIT = 9,
	IB_CM_MRA_RECEIVED = 10,
	IB_CM_REJ_RECEIVED = 11,
	IB_CM_LAP_ERROR = 12,
	IB_CM_LAP_RECEIVED = 13,
	IB_CM_APR_RECEIVED = 14,
	IB_CM_SIDR_REQ_ERROR = 15,
	IB_CM_SIDR_REQ_RECEIVED = 16,
	IB_CM_SIDR_REP_RECEIVED = 17,
	IB_CM_EVENT_COUNT = 18,
};

/* ib_ucm_event_resp.present */
#define IB_UCM_PRES_DATA 0x01
#define IB_UCM_PRES_INFO 0x02
#define IB_UCM_PRES_PRIMARY 0x04
#define IB_UCM_PRES_ALTERNATE 0x08
#define IB_UCM_PRES_ALL 0x0f

/* NOTIFY events (enum ib_event_type). */
#define UCM_EVENT_COMM_EST 4
#define UCM_EVENT_PATH_MIG 6

/* QP states (enum ib_qp_state) as INIT_QP_ATTR takes them. */
#define UCM_QPS_RESET 0
#define UCM_QPS_INIT 1
#define UCM_QPS_RTR 2
#define UCM_QPS_RTS 3

/* qp_attr_mask bits (kernel IB_QP_* == IBV_QP_*). */
#define UCM_QP_STATE (1u << 0)
#define UCM_QP_CUR_STATE (1u << 1)
#define UCM_QP_EN_SQD_ASYNC_NOTIFY (1u << 2)
#define UCM_QP_ACCESS_FLAGS (1u << 3)
#define UCM_QP_PKEY_INDEX (1u << 4)
#define UCM_QP_PORT (1u << 5)
#define UCM_QP_QKEY (1u << 6)
#define UCM_QP_AV (1u << 7)
#define UCM_QP_PATH_MTU (1u << 8)
#define UCM_QP_TIMEOUT (1u << 9)
#define UCM_QP_RETRY_CNT (1u << 10)
#define UCM_QP_RNR_RETRY (1u << 11)
#define UCM_QP_RQ_PSN (1u << 12)
#define UCM_QP_MAX_QP_RD_ATOMIC (1u << 13)
#define UCM_QP_ALT_PATH (1u << 14)
#define UCM_QP_MIN_RNR_TIMER (1u << 15)
#define UCM_QP_SQ_PSN (1u << 16)
#define UCM_QP_MAX_DEST_RD_ATOMIC (1u << 17)
#define UCM_QP_PATH_MIG_STATE (1u << 18)
#define UCM_QP_CAP (1u << 19)
#define UCM_QP_DEST_QPN (1u << 20)
#define UCM_QP_ALL_KNOWN ((1u << 21) - 1)

/* CM private-data area sizes: what GET_EVENT delivers for each message. */
#define UCM_REQ_PDATA 92
#define UCM_MRA_PDATA 222
#define UCM_REJ_PDATA 148
#define UCM_REP_PDATA 196
#define UCM_RTU_PDATA 224
#define UCM_DREQ_PDATA 220
#define UCM_DREP_PDATA 224
#define UCM_LAP_PDATA 168
#define UCM_APR_PDATA 148
#define UCM_SIDR_REQ_PDATA 216
#define UCM_SIDR_REP_PDATA 136
#define UCM_ARI_MAX 72

/* QP type values used in SEND_REQ (enum ib_qp_type). */
#define UCM_QPT_RC 2
#define UCM_QPT_UC 3

/* ------------------------------------------------------------------------ */
/* Header                                                                    */

struct ib_ucm_cmd_hdr {
	uint32_t cmd;
	uint16_t in;  /* bytes of command struct that follow */
	uint16_t out; /* size of the caller's response buffer */
};

/* ------------------------------------------------------------------------ */
/* Command structs (user -> device)                                          */

struct ib_ucm_create_id {
	ucm_u64 uid;      /* opaque cookie echoed in every event */
	ucm_u64 response; /* -> struct ib_ucm_create_id_resp */
};

struct ib_ucm_create_id_resp {
	uint32_t id;
};

struct ib_ucm_destroy_id {
	ucm_u64 response; /* -> struct ib_ucm_destroy_id_resp */
	uint32_t id;
	uint32_t reserved;
};

struct ib_ucm_destroy_id_resp {
	uint32_t events_reported;
};

struct ib_ucm_attr_id {
	ucm_u64 response; /* -> struct ib_ucm_attr_id_resp */
	uint32_t id;
	uint32_t reserved;
};

struct ib_ucm_attr_id_resp {
	uint64_t service_id;   /* be */
	uint64_t service_mask; /* be */
	uint32_t local_id;     /* be */
	uint32_t remote_id;    /* be */
};

struct ib_ucm_init_qp_attr {
	ucm_u64 response; /* -> struct ucm_uverbs_qp_attr */
	uint32_t id;
	uint32_t qp_state;
};

struct ib_ucm_listen {
	uint64_t service_id;   /* be */
	uint64_t service_mask; /* be */
	uint32_t id;
	uint32_t reserved;
};

struct ib_ucm_notify {
	uint32_t id;
	uint32_t event;
};

/* ABI 4's ESTABLISH (command 4 with in = 4). */
struct ib_ucm_establish {
	uint32_t id;
};

struct ib_ucm_private_data { /* SEND_RTU / SEND_DREQ / SEND_DREP */
	ucm_u64 data;
	uint32_t id;
	uint8_t len;
	uint8_t reserved[3];
};

struct ib_ucm_req {
	uint32_t id;
	uint32_t qpn;
	uint32_t qp_type;
	uint32_t psn;
	uint64_t sid; /* be */
	ucm_u64 data;
	ucm_u64 primary_path;   /* -> struct ucm_user_path_rec */
	ucm_u64 alternate_path; /* -> struct ucm_user_path_rec or 0 */
	uint8_t len;
	uint8_t peer_to_peer;
	uint8_t responder_resources;
	uint8_t initiator_depth;
	uint8_t remote_cm_response_timeout;
	uint8_t flow_control;
	uint8_t local_cm_response_timeout;
	uint8_t retry_count;
	uint8_t rnr_retry_count;
	uint8_t max_cm_retries;
	uint8_t srq;
	uint8_t reserved[5];
};

struct ib_ucm_rep {
	ucm_u64 uid;
	ucm_u64 data;
	uint32_t id;
	uint32_t qpn;
	uint32_t psn;
	uint8_t len;
	uint8_t responder_resources;
	uint8_t initiator_depth;
	uint8_t target_ack_delay;
	uint8_t failover_accepted;
	uint8_t flow_control;
	uint8_t rnr_retry_count;
	uint8_t srq;
	uint8_t reserved[4];
};

struct ib_ucm_info { /* SEND_REJ / SEND_APR */
	uint32_t id;
	uint32_t status;
	ucm_u64 info;
	ucm_u64 data;
	uint8_t info_len;
	uint8_t data_len;
	uint8_t reserved[6];
};

struct ib_ucm_mra {
	ucm_u64 data;
	uint32_t id;
	uint8_t len;
	uint8_t timeout;
	uint8_t reserved[2];
};

struct ib_ucm_lap {
	ucm_u64 path;
	ucm_u64 data;
	uint32_t id;
	uint8_t len;
	uint8_t reserved[3];
};

struct ib_ucm_sidr_req {
	uint32_t id;
	uint32_t timeout; /* ms */
	uint64_t sid;     /* be */
	ucm_u64 data;
	ucm_u64 path;
	uint16_t reserved_pkey;
	uint8_t len;
	uint8_t max_cm_retries;
	uint8_t reserved[4];
};

struct ib_ucm_sidr_rep {
	uint32_t id;
	uint32_t qpn;
	uint32_t qkey;
	uint32_t status;
	ucm_u64 info;
	ucm_u64 data;
	uint8_t info_len;
	uint8_t data_len;
	uint8_t reserved[6];
};

struct ib_ucm_event_get {
	ucm_u64 response; /* -> struct ib_ucm_event_resp */
	ucm_u64 data;     /* -> data_len bytes */
	ucm_u64 info;     /* -> info_len bytes */
	uint8_t data_len;
	uint8_t info_len;
	uint8_t reserved[6];
};

/* ------------------------------------------------------------------------ */
/* Shared with uverbs and the SA                                             */

struct ucm_user_path_rec { /* struct ib_user_path_rec */
	uint8_t dgid[16];
	uint8_t sgid[16];
	uint16_t dlid; /* be */
	uint16_t slid; /* be */
	uint32_t raw_traffic;
	uint32_t flow_label; /* be */
	uint32_t reversible;
	uint32_t mtu; /* IB MTU enum 1..5 */
	uint16_t pkey; /* be */
	uint8_t hop_limit;
	uint8_t traffic_class;
	uint8_t numb_path;
	uint8_t sl;
	uint8_t mtu_selector;
	uint8_t rate_selector;
	uint8_t rate;
	uint8_t packet_life_time_selector;
	uint8_t packet_life_time;
	uint8_t preference;
};

struct ucm_uverbs_global_route { /* struct ib_uverbs_global_route */
	uint8_t dgid[16];
	uint32_t flow_label;
	uint8_t sgid_index;
	uint8_t hop_limit;
	uint8_t traffic_class;
	uint8_t reserved;
};

struct ucm_uverbs_ah_attr { /* struct ib_uverbs_ah_attr */
	struct ucm_uverbs_global_route grh;
	uint16_t dlid; /* host order */
	uint8_t sl;
	uint8_t src_path_bits;
	uint8_t static_rate;
	uint8_t is_global;
	uint8_t port_num;
	uint8_t reserved;
};

struct ucm_uverbs_qp_attr { /* struct ib_uverbs_qp_attr, all host order */
	uint32_t qp_attr_mask;
	uint32_t qp_state;
	uint32_t cur_qp_state;
	uint32_t path_mtu;
	uint32_t path_mig_state;
	uint32_t qkey;
	uint32_t rq_psn;
	uint32_t sq_psn;
	uint32_t dest_qp_num;
	uint32_t qp_access_flags;
	struct ucm_uverbs_ah_attr ah_attr;
	struct ucm_uverbs_ah_attr alt_ah_attr;
	uint32_t max_send_wr;
	uint32_t max_recv_wr;
	uint32_t max_send_sge;
	uint32_t max_recv_sge;
	uint32_t max_inline_data;
	uint16_t pkey_index;
	uint16_t alt_pkey_index;
	uint8_t en_sqd_async_notify;
	uint8_t sq_draining;
	uint8_t max_rd_atomic;
	uint8_t max_dest_rd_atomic;
	uint8_t min_rnr_timer;
	uint8_t port_num;
	uint8_t timeout;
	uint8_t retry_cnt;
	uint8_t rnr_retry;
	uint8_t alt_port_num;
	uint8_t alt_timeout;
	uint8_t reserved[5];
};

/* ------------------------------------------------------------------------ */
/* Event response (device -> user)                                           */

struct ib_ucm_req_event_resp {
	struct ucm_user_path_rec primary_path;
	struct ucm_user_path_rec alternate_path;
	uint64_t remote_ca_guid; /* be */
	uint32_t remote_qkey;
	uint32_t remote_qpn;
	uint32_t qp_type;
	uint32_t starting_psn;
	uint8_t responder_resources;
	uint8_t initiator_depth;
	uint8_t local_cm_response_timeout;
	uint8_t flow_control;
	uint8_t remote_cm_response_timeout;
	uint8_t retry_count;
	uint8_t rnr_retry_count;
	uint8_t srq;
	uint8_t port;
	uint8_t reserved[7];
};

struct ib_ucm_rep_event_resp {
	uint64_t remote_ca_guid; /* be */
	uint32_t remote_qkey;
	uint32_t remote_qpn;
	uint32_t starting_psn;
	uint8_t responder_resources;
	uint8_t initiator_depth;
	uint8_t target_ack_delay;
	uint8_t failover_accepted;
	uint8_t flow_control;
	uint8_t rnr_retry_count;
	uint8_t srq;
	uint8_t reserved[5];
};

struct ib_ucm_rej_event_resp {
	uint32_t reason; /* ARI goes to the info buffer */
};

struct ib_ucm_mra_event_resp {
	uint8_t timeout;
	uint8_t reserved[3];
};

struct ib_ucm_lap_event_resp {
	struct ucm_user_path_rec path;
};

struct ib_ucm_apr_event_resp {
	uint32_t status;
};

struct ib_ucm_sidr_req_event_resp {
	uint16_t pkey; /* host order */
	uint8_t port;
	uint8_t reserved;
};

struct ib_ucm_sidr_rep_event_resp {
	uint32_t status;
	uint32_t qkey;
	uint32_t qpn;
};

struct ib_ucm_event_resp {
	ucm_u64 uid;
	uint32_t id;
	uint32_t event;
	uint32_t present;
	uint32_t reserved;
	union {
		struct ib_ucm_req_event_resp req_resp;
		struct ib_ucm_rep_event_resp rep_resp;
		struct ib_ucm_rej_event_resp rej_resp;
		struct ib_ucm_mra_event_resp mra_resp;
		struct ib_ucm_lap_event_resp lap_resp;
		struct ib_ucm_apr_event_resp apr_resp;
		struct ib_ucm_sidr_req_event_resp sidr_req_resp;
		struct ib_ucm_sidr_rep_event_resp sidr_rep_resp;
		uint32_t send_status;
	} u;
};

/* ------------------------------------------------------------------------ */
/* Compile-time layout checks (docs/ucm-abi.md §2.2, §2.4, §2.5)             */

#define UCM_SIZE(t, n) _Static_assert(sizeof(struct t) == (n), "sizeof(struct " #t ") != " #n)
#define UCM_OFF(t, f, n) \
	_Static_assert(offsetof(struct t, f) == (n), "offsetof(struct " #t ", " #f ") != " #n)

UCM_SIZE(ib_ucm_cmd_hdr, 8);
UCM_OFF(ib_ucm_cmd_hdr, cmd, 0);
UCM_OFF(ib_ucm_cmd_hdr, in, 4);
UCM_OFF(ib_ucm_cmd_hdr, out, 6);

UCM_SIZE(ib_ucm_create_id, 16);
UCM_OFF(ib_ucm_create_id, uid, 0);
UCM_OFF(ib_ucm_create_id, response, 8);
UCM_SIZE(ib_ucm_create_id_resp, 4);

UCM_SIZE(ib_ucm_destroy_id, 16);
UCM_OFF(ib_ucm_destroy_id, response, 0);
UCM_OFF(ib_ucm_destroy_id, id, 8);
UCM_OFF(ib_ucm_destroy_id, reserved, 12);
UCM_SIZE(ib_ucm_destroy_id_resp, 4);

UCM_SIZE(ib_ucm_attr_id, 16);
UCM_OFF(ib_ucm_attr_id, response, 0);
UCM_OFF(ib_ucm_attr_id, id, 8);
UCM_SIZE(ib_ucm_attr_id_resp, 24);
UCM_OFF(ib_ucm_attr_id_resp, service_mask, 8);
UCM_OFF(ib_ucm_attr_id_resp, local_id, 16);
UCM_OFF(ib_ucm_attr_id_resp, remote_id, 20);

UCM_SIZE(ib_ucm_init_qp_attr, 16);
UCM_OFF(ib_ucm_init_qp_attr, response, 0);
UCM_OFF(ib_ucm_init_qp_attr, id, 8);
UCM_OFF(ib_ucm_init_qp_attr, qp_state, 12);

UCM_SIZE(ib_ucm_listen, 24);
UCM_OFF(ib_ucm_listen, service_id, 0);
UCM_OFF(ib_ucm_listen, service_mask, 8);
UCM_OFF(ib_ucm_listen, id, 16);
UCM_OFF(ib_ucm_listen, reserved, 20);

UCM_SIZE(ib_ucm_notify, 8);
UCM_OFF(ib_ucm_notify, event, 4);
UCM_SIZE(ib_ucm_establish, 4);

UCM_SIZE(ib_ucm_private_data, 16);
UCM_OFF(ib_ucm_private_data, data, 0);
UCM_OFF(ib_ucm_private_data, id, 8);
UCM_OFF(ib_ucm_private_data, len, 12);
UCM_OFF(ib_ucm_private_data, reserved, 13);

UCM_SIZE(ib_ucm_req, 64);
UCM_OFF(ib_ucm_req, qpn, 4);
UCM_OFF(ib_ucm_req, qp_type, 8);
UCM_OFF(ib_ucm_req, psn, 12);
UCM_OFF(ib_ucm_req, sid, 16);
UCM_OFF(ib_ucm_req, data, 24);
UCM_OFF(ib_ucm_req, primary_path, 32);
UCM_OFF(ib_ucm_req, alternate_path, 40);
UCM_OFF(ib_ucm_req, len, 48);
UCM_OFF(ib_ucm_req, peer_to_peer, 49);
UCM_OFF(ib_ucm_req, responder_resources, 50);
UCM_OFF(ib_ucm_req, initiator_depth, 51);
UCM_OFF(ib_ucm_req, remote_cm_response_timeout, 52);
UCM_OFF(ib_ucm_req, flow_control, 53);
UCM_OFF(ib_ucm_req, local_cm_response_timeout, 54);
UCM_OFF(ib_ucm_req, retry_count, 55);
UCM_OFF(ib_ucm_req, rnr_retry_count, 56);
UCM_OFF(ib_ucm_req, max_cm_retries, 57);
UCM_OFF(ib_ucm_req, srq, 58);
UCM_OFF(ib_ucm_req, reserved, 59);

UCM_SIZE(ib_ucm_rep, 40);
UCM_OFF(ib_ucm_rep, uid, 0);
UCM_OFF(ib_ucm_rep, data, 8);
UCM_OFF(ib_ucm_rep, id, 16);
UCM_OFF(ib_ucm_rep, qpn, 20);
UCM_OFF(ib_ucm_rep, psn, 24);
UCM_OFF(ib_ucm_rep, len, 28);
UCM_OFF(ib_ucm_rep, responder_resources, 29);
UCM_OFF(ib_ucm_rep, initiator_depth, 30);
UCM_OFF(ib_ucm_rep, target_ack_delay, 31);
UCM_OFF(ib_ucm_rep, failover_accepted, 32);
UCM_OFF(ib_ucm_rep, flow_control, 33);
UCM_OFF(ib_ucm_rep, rnr_retry_count, 34);
UCM_OFF(ib_ucm_rep, srq, 35);
UCM_OFF(ib_ucm_rep, reserved, 36);

UCM_SIZE(ib_ucm_info, 32);
UCM_OFF(ib_ucm_info, status, 4);
UCM_OFF(ib_ucm_info, info, 8);
UCM_OFF(ib_ucm_info, data, 16);
UCM_OFF(ib_ucm_info, info_len, 24);
UCM_OFF(ib_ucm_info, data_len, 25);

UCM_SIZE(ib_ucm_mra, 16);
UCM_OFF(ib_ucm_mra, id, 8);
UCM_OFF(ib_ucm_mra, len, 12);
UCM_OFF(ib_ucm_mra, timeout, 13);

UCM_SIZE(ib_ucm_lap, 24);
UCM_OFF(ib_ucm_lap, data, 8);
UCM_OFF(ib_ucm_lap, id, 16);
UCM_OFF(ib_ucm_lap, len, 20);

UCM_SIZE(ib_ucm_sidr_req, 40);
UCM_OFF(ib_ucm_sidr_req, timeout, 4);
UCM_OFF(ib_ucm_sidr_req, sid, 8);
UCM_OFF(ib_ucm_sidr_req, data, 16);
UCM_OFF(ib_ucm_sidr_req, path, 24);
UCM_OFF(ib_ucm_sidr_req, reserved_pkey, 32);
UCM_OFF(ib_ucm_sidr_req, len, 34);
UCM_OFF(ib_ucm_sidr_req, max_cm_retries, 35);

UCM_SIZE(ib_ucm_sidr_rep, 40);
UCM_OFF(ib_ucm_sidr_rep, qkey, 8);
UCM_OFF(ib_ucm_sidr_rep, status, 12);
UCM_OFF(ib_ucm_sidr_rep, info, 16);
UCM_OFF(ib_ucm_sidr_rep, data, 24);
UCM_OFF(ib_ucm_sidr_rep, info_len, 32);
UCM_OFF(ib_ucm_sidr_rep, data_len, 33);

UCM_SIZE(ib_ucm_event_get, 32);
UCM_OFF(ib_ucm_event_get, response, 0);
UCM_OFF(ib_ucm_event_get, data, 8);
UCM_OFF(ib_ucm_event_get, info, 16);
UCM_OFF(ib_ucm_event_get, data_len, 24);
UCM_OFF(ib_ucm_event_get, info_len, 25);
UCM_OFF(ib_ucm_event_get, reserved, 26);

UCM_SIZE(ucm_user_path_rec, 64);
UCM_OFF(ucm_user_path_rec, sgid, 16);
UCM_OFF(ucm_user_path_rec, dlid, 32);
UCM_OFF(ucm_user_path_rec, slid, 34);
UCM_OFF(ucm_user_path_rec, raw_traffic, 36);
UCM_OFF(ucm_user_path_rec, flow_label, 40);
UCM_OFF(ucm_user_path_rec, reversible, 44);
UCM_OFF(ucm_user_path_rec, mtu, 48);
UCM_OFF(ucm_user_path_rec, pkey, 52);
UCM_OFF(ucm_user_path_rec, hop_limit, 54);
UCM_OFF(ucm_user_path_rec, traffic_class, 55);
UCM_OFF(ucm_user_path_rec, numb_path, 56);
UCM_OFF(ucm_user_path_rec, sl, 57);
UCM_OFF(ucm_user_path_rec, mtu_selector, 58);
UCM_OFF(ucm_user_path_rec, rate_selector, 59);
UCM_OFF(ucm_user_path_rec, rate, 60);
UCM_OFF(ucm_user_path_rec, packet_life_time_selector, 61);
UCM_OFF(ucm_user_path_rec, packet_life_time, 62);
UCM_OFF(ucm_user_path_rec, preference, 63);

UCM_SIZE(ucm_uverbs_global_route, 24);
UCM_OFF(ucm_uverbs_global_route, flow_label, 16);
UCM_OFF(ucm_uverbs_global_route, sgid_index, 20);
UCM_OFF(ucm_uverbs_global_route, hop_limit, 21);
UCM_OFF(ucm_uverbs_global_route, traffic_class, 22);
UCM_SIZE(ucm_uverbs_ah_attr, 32);
UCM_OFF(ucm_uverbs_ah_attr, dlid, 24);
UCM_OFF(ucm_uverbs_ah_attr, sl, 26);
UCM_OFF(ucm_uverbs_ah_attr, src_path_bits, 27);
UCM_OFF(ucm_uverbs_ah_attr, static_rate, 28);
UCM_OFF(ucm_uverbs_ah_attr, is_global, 29);
UCM_OFF(ucm_uverbs_ah_attr, port_num, 30);

UCM_SIZE(ucm_uverbs_qp_attr, 144);
UCM_OFF(ucm_uverbs_qp_attr, qp_state, 4);
UCM_OFF(ucm_uverbs_qp_attr, cur_qp_state, 8);
UCM_OFF(ucm_uverbs_qp_attr, path_mtu, 12);
UCM_OFF(ucm_uverbs_qp_attr, path_mig_state, 16);
UCM_OFF(ucm_uverbs_qp_attr, qkey, 20);
UCM_OFF(ucm_uverbs_qp_attr, rq_psn, 24);
UCM_OFF(ucm_uverbs_qp_attr, sq_psn, 28);
UCM_OFF(ucm_uverbs_qp_attr, dest_qp_num, 32);
UCM_OFF(ucm_uverbs_qp_attr, qp_access_flags, 36);
UCM_OFF(ucm_uverbs_qp_attr, ah_attr, 40);
UCM_OFF(ucm_uverbs_qp_attr, alt_ah_attr, 72);
UCM_OFF(ucm_uverbs_qp_attr, max_send_wr, 104);
UCM_OFF(ucm_uverbs_qp_attr, max_inline_data, 120);
UCM_OFF(ucm_uverbs_qp_attr, pkey_index, 124);
UCM_OFF(ucm_uverbs_qp_attr, alt_pkey_index, 126);
UCM_OFF(ucm_uverbs_qp_attr, en_sqd_async_notify, 128);
UCM_OFF(ucm_uverbs_qp_attr, max_rd_atomic, 130);
UCM_OFF(ucm_uverbs_qp_attr, max_dest_rd_atomic, 131);
UCM_OFF(ucm_uverbs_qp_attr, min_rnr_timer, 132);
UCM_OFF(ucm_uverbs_qp_attr, port_num, 133);
UCM_OFF(ucm_uverbs_qp_attr, timeout, 134);
UCM_OFF(ucm_uverbs_qp_attr, retry_cnt, 135);
UCM_OFF(ucm_uverbs_qp_attr, rnr_retry, 136);
UCM_OFF(ucm_uverbs_qp_attr, alt_port_num, 137);
UCM_OFF(ucm_uverbs_qp_attr, alt_timeout, 138);
UCM_OFF(ucm_uverbs_qp_attr, reserved, 139);

UCM_SIZE(ib_ucm_req_event_resp, 168);
UCM_OFF(ib_ucm_req_event_resp, alternate_path, 64);
UCM_OFF(ib_ucm_req_event_resp, remote_ca_guid, 128);
UCM_OFF(ib_ucm_req_event_resp, remote_qkey, 136);
UCM_OFF(ib_ucm_req_event_resp, remote_qpn, 140);
UCM_OFF(ib_ucm_req_event_resp, qp_type, 144);
UCM_OFF(ib_ucm_req_event_resp, starting_psn, 148);
UCM_OFF(ib_ucm_req_event_resp, responder_resources, 152);
UCM_OFF(ib_ucm_req_event_resp, initiator_depth, 153);
UCM_OFF(ib_ucm_req_event_resp, local_cm_response_timeout, 154);
UCM_OFF(ib_ucm_req_event_resp, flow_control, 155);
UCM_OFF(ib_ucm_req_event_resp, remote_cm_response_timeout, 156);
UCM_OFF(ib_ucm_req_event_resp, retry_count, 157);
UCM_OFF(ib_ucm_req_event_resp, rnr_retry_count, 158);
UCM_OFF(ib_ucm_req_event_resp, srq, 159);
UCM_OFF(ib_ucm_req_event_resp, port, 160);
UCM_OFF(ib_ucm_req_event_resp, reserved, 161);

UCM_SIZE(ib_ucm_rep_event_resp, 32);
UCM_OFF(ib_ucm_rep_event_resp, remote_qkey, 8);
UCM_OFF(ib_ucm_rep_event_resp, remote_qpn, 12);
UCM_OFF(ib_ucm_rep_event_resp, starting_psn, 16);
UCM_OFF(ib_ucm_rep_event_resp, responder_resources, 20);
UCM_OFF(ib_ucm_rep_event_resp, initiator_depth, 21);
UCM_OFF(ib_ucm_rep_event_resp, target_ack_delay, 22);
UCM_OFF(ib_ucm_rep_event_resp, failover_accepted, 23);
UCM_OFF(ib_ucm_rep_event_resp, flow_control, 24);
UCM_OFF(ib_ucm_rep_event_resp, rnr_retry_count, 25);
UCM_OFF(ib_ucm_rep_event_resp, srq, 26);
UCM_OFF(ib_ucm_rep_event_resp, reserved, 27);

UCM_SIZE(ib_ucm_rej_event_resp, 4);
UCM_SIZE(ib_ucm_mra_event_resp, 4);
UCM_SIZE(ib_ucm_lap_event_resp, 64);
UCM_SIZE(ib_ucm_apr_event_resp, 4);
UCM_SIZE(ib_ucm_sidr_req_event_resp, 4);
UCM_OFF(ib_ucm_sidr_req_event_resp, port, 2);
UCM_SIZE(ib_ucm_sidr_rep_event_resp, 12);
UCM_OFF(ib_ucm_sidr_rep_event_resp, qkey, 4);
UCM_OFF(ib_ucm_sidr_rep_event_resp, qpn, 8);

UCM_SIZE(ib_ucm_event_resp, 192);
UCM_OFF(ib_ucm_event_resp, uid, 0);
UCM_OFF(ib_ucm_event_resp, id, 8);
UCM_OFF(ib_ucm_event_resp, event, 12);
UCM_OFF(ib_ucm_event_resp, present, 16);
UCM_OFF(ib_ucm_event_resp, reserved, 20);
UCM_OFF(ib_ucm_event_resp, u, 24);

#endif /* UCMCLIENT_UCM_ABI_H */
