// Package ucm is the device behind /dev/infiniband/ucmN: the legacy ib_ucm
// write() ABI (version 5) served over CUSE on top of a cmcore CM.
//
// A Device implements cuse.Device for one RDMA device. Each open file keeps
// its ids, a FIFO queue of events across those ids, and the GET_EVENT
// callers waiting for one; every command is decoded with package abi and
// answered with the errno the kernel's ucm.c chose, reading and writing the
// caller's memory through callermem the way copy_from_user and copy_to_user
// did (docs/ucm-abi.md §3).
//
// Ids come from an IDTable shared by every Device of a daemon: one global
// space, lowest free id first, like the kernel's ctx_id_table idr.
//
// Deliberate differences from ucm.c (each fixes a kernel bug or quirk):
//   - A new connection's id is created when its REQ or SIDR_REQ arrives,
//     hidden (ENOENT) until GET_EVENT delivers that event, so a GET_EVENT
//     that fails and is retried never allocates a second id. Its events
//     queued meanwhile are the listener's, as in the kernel.
//   - An id is visible only once fully initialised, and its number is
//     reused only after DESTROY_ID has purged its events.
//   - INIT_QP_ATTR answers are zeroed before encoding (no stack garbage).
//   - Every wait ends on a signal (FUSE INTERRUPT), where the kernel's
//     DESTROY_ID waited uninterruptibly: our copies into the client can
//     hang. DESTROY_ID still waiting for a command answers EINTR with the
//     id untouched; one waiting for a hung copy of the id's event takes the
//     event from that GET_EVENT (which then fails with EINTR) and completes.
package ucm
