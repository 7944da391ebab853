// Package trace is `ucmd trace`: the daemon's stream of CM MADs and what
// the command makes of it.
//
// In the daemon, a Hub is one of the CMs' observers (cmcore.Observer): for
// every MAD sent, received, retransmitted, dropped or refused, and every
// final timeout, it copies the MAD into each subscriber's bounded buffer
// and returns; with no subscriber it does nothing but one atomic load. A
// subscriber whose buffer is full loses the MAD, and its stream gets a
// marker with the count where the gap is: a slow reader never slows the
// CM. Each subscriber's own goroutine resolves what the CM's path does not
// look up (the port's GIDs and P_Key, the process owning the comm id
// through the ucm files, the connection's service id), applies the
// subscriber's Filter and writes Event lines (JSON) to its connection.
//
// The trace socket (SocketName in the runtime directory) is made with the
// status socket's access rule (root only; serve --status-group: that
// group): it carries the same private data. A client sends one Request
// line and reads Event lines until it closes the connection (Dial).
//
// The command prints events as lines (Line), writes pcapng (Capture:
// RoCEv2 frames on RoCE ports, LINKTYPE_INFINIBAND on IB ports, see
// Frame), or draws a connection's ladder (Ladder).
package trace
