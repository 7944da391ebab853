package storm

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"
)

// Settings no storm can run are refused with the flag's name, before
// anything starts: a negative spread panicked in rand.Int64N, an accept
// rate of 1e9 per second or more hung (a zero tick re-arming itself within
// one Advance, past any context).
func TestBadSettings(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{Nodes: 4, Pattern: RingOnDemand, OnDemandSpread: -time.Millisecond}, "--on-demand-spread -1ms: cannot be negative"},
		{Config{Nodes: 4, StartSpread: -1}, "--start-spread -1ns: cannot be negative"},
		{Config{Nodes: 4, Loss: 1.5}, "--loss 1.5: want a probability from 0 to 1"},
		{Config{Nodes: 4, Reorder: math.NaN()}, "--reorder NaN: want a probability"},
		{Config{Nodes: 4, OnDemand: -2, Latency: -time.Second}, "--on-demand -2: cannot be negative\n--latency -1s: cannot be negative"},
	} {
		if _, err := Run(ctx, c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Run(%+v): %v, want %q", c.cfg, err, c.want)
		}
	}
	for _, c := range []struct {
		cfg  ListenerConfig
		want string
	}{
		{ListenerConfig{Requests: 10, Senders: 2, AcceptRate: 2e9}, "--accept-rate 2e+09: want 0 to 1e+06 per second"},
		{ListenerConfig{Requests: 10, Senders: 2, AcceptRate: math.Inf(1)}, "--accept-rate +Inf"},
		{ListenerConfig{Requests: 10, Senders: 2, AcceptRate: -1}, "--accept-rate -1"},
		{ListenerConfig{Requests: -5}, "--requests -5: cannot be negative"},
		{ListenerConfig{Requests: 10, MRAServiceTimeout: 32}, "--mra-timeout 32: want a 5-bit IBTA time"},
		{ListenerConfig{Requests: 10, Within: -time.Millisecond}, "--within -1ms"},
	} {
		if _, err := RunListener(ctx, c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("RunListener(%+v): %v, want %q", c.cfg, err, c.want)
		}
	}
}
