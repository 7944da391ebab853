// Package cuse is a CUSE (character device in userspace) server: it
// registers a character device such as /dev/infiniband/ucm0 through the
// kernel's /dev/cuse and serves the open, read, write, poll and close calls
// that clients make on it.
//
// The kernel forwards each such call as a FUSE request on the /dev/cuse
// channel. A Server reads the channel with a small pool of reader
// goroutines, as libfuse's multi-threaded loop does: each blocks in
// read(2) on the channel (the kernel wakes one reader per request and
// hands it the request) and serves the request it read itself, and a
// reader that leaves no other one waiting starts another first. So every request is served in its own
// goroutine and a call that blocks never delays another, while a request
// on an idle server costs one wake-up and no goroutine hand-off. A device implements Device and Handle;
// the Server does the protocol: the CUSE_INIT handshake, per-file handles,
// poll registration and FUSE_NOTIFY_POLL wake-ups, interrupts (a signalled
// client cancels its request's context), and error replies.
//
// The caller of every request is identified by the kernel (Caller); a device
// that must read or write the caller's memory uses package
// github.com/ucmd/ucmd/cuse/callermem. Package cusetest is a fake kernel for
// testing devices without root or /dev/cuse.
package cuse
