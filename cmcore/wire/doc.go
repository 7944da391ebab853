// Package wire encodes and decodes the management datagrams of the
// InfiniBand Communication Manager (IBTA vol. 1 ch. 12, management class
// 0x07, class version 2): REQ, MRA, REJ, REP, RTU, DREQ, DREP, LAP, APR,
// SIDR_REQ and SIDR_REP.
//
// The layouts are those of the IBTA tables as the Linux kernel's cm.c sends
// them: every field big-endian, sub-byte fields MSB-first within their byte,
// 24-bit QPNs, PSNs and EECNs in the top three bytes of a 32-bit word. Encode
// writes every reserved bit as zero; Decode ignores reserved bits, including
// the ECE vendor ID that kernels since 5.8 put into some of them.
//
// Private data always runs to the end of the 256-byte MAD, so a receiver
// cannot know how much of it the sender meant: Decode returns the whole
// fixed-size area and Encode zero-pads what it is given.
//
// The package knows nothing about connection state. In particular the
// transaction ID is the caller's: Linux forms a new TID as
// (agent hi_tid << 32) | local comm ID, but on little-endian hosts it ORs
// the big-endian comm ID in numerically, so the low half of a kernel TID is
// the comm ID byte-swapped (comm ID 4a3b9bee, TID low half ee9b3b4a). umad
// rewrites the upper half of every TID a userspace sender chooses, and
// replies echo the received TID unchanged. Linux never checks TIDs.
package wire
