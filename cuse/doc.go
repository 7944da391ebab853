// Package cuse is a CUSE (character device in userspace) server: it
// registers a character device such as /dev/infiniband/ucm0 through the
// kernel's /dev/cuse and serves the open, read, write, poll and close calls
// that clients make on it.
//
// The kernel forwards each such call as a FUSE request on the /dev/cuse
// channel. A Server reads the channel with one goroutine parked in Go's
// runtime poller and serves every request in its own goroutine, so a call
// that blocks never delays another. A device implements Device and Handle;
// the Server does the protocol: the CUSE_INIT handshake, per-file handles,
// poll registration and FUSE_NOTIFY_POLL wake-ups, interrupts (a signalled
// client cancels its request's context), and error replies.
//
// The caller of every request is identified by the kernel (Caller); a device
// that must read or write the caller's memory uses package
// github.com/ucmd/ucmd/cuse/callermem. Package cusetest is a fake kernel for
// testing devices without root or /dev/cuse.
package cuse
