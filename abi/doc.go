// Package abi is the legacy ib_ucm user ABI, version 5 (<rdma/ib_user_cm.h>,
// removed from Linux in v5.3), byte for byte: the write() command header and
// command structs a client sends to /dev/infiniband/ucmN, the responses the
// driver copies back to the client's memory, and the shared
// ib_user_path_rec and ib_uverbs_qp_attr layouts.
//
// Every struct has a Size, an Encode and a Decode that read and write the
// documented offsets with encoding/binary; nothing is cast from foreign bytes.
// Fields the kernel declares as host-order (__u16, __u32, __u64) use the host's
// byte order (binary.NativeEndian), since the client is a process on this host.
// Fields declared __be16/__be32/__be64 (service ids and masks, comm ids, path
// LIDs, P_Keys and flow labels, CA GUIDs) are big-endian on the wire and hold
// their numeric value in Go. User-space pointers (response, data, info, path…)
// are plain uint64 values; the caller's memory is not this package's business.
// Reserved padding is not represented: Decode ignores it, Encode writes zeroes.
// (ib_ucm_sidr_req's named reserved_pkey is kept as SIDRREQ.ReservedPKey.)
//
// Encode and Decode (the Struct interface) are also the API for Go clients
// of the device: a client encodes a Header and a command struct into one
// write() and decodes the responses it reads back from its own memory, as
// the conformance suite's client does (conformance/client.go). There is no
// second codec: the codec convention is docs/design.md §10.3.
//
// # Parsing a write()
//
// ParseCommand applies the kernel's ib_ucm_write checks in the kernel's order
// (buffer shorter than the header, command number out of range, in+8 beyond the
// buffer: all EINVAL) and returns the header and a typed command, or an error
// wrapping the unix.Errno to fail the write() with.
//
// The kernel never compared hdr.in with the command struct: each handler did
// copy_from_user(&cmd, buf+8, sizeof(cmd)), reading the full struct from the
// caller's buffer whatever in said. ParseCommand does the same with the bytes
// it has: the command struct is decoded from everything after the header (the
// trailing bytes beyond in included, exactly what the kernel read), and only the
// part beyond the end of the write, which the kernel read from whatever followed
// in the caller's memory and which a CUSE daemon never sees, is zero-filled. A
// short in is therefore accepted, as the kernel accepted it. libibcm always
// sends in == sizeof(cmd), so this only matters for hand-made clients.
//
// One deliberate exception: command 4 with in == 4 is the ABI-4 ESTABLISH
// command ({u32 id}, 12-byte write), which the ABI-5 kernel would have decoded
// with 4 bytes of garbage as the event. It is returned as a Notify with event
// IBEventCommEst, the only event ESTABLISH could express.
//
// # Responses and events
//
// CreateIDResp, DestroyIDResp, AttrIDResp, QPAttr and EventResp are what the
// device writes to the client's response pointer. EventResp carries the
// 168-byte union of ib_ucm_event_resp as an EventUnion, filled and read
// through typed member accessors (SetREQ, REP, SendStatus…), which zero the
// rest of the union as the kernel's zeroed allocation did.
package abi
