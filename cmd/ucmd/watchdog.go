package main

import (
	"context"
	"log/slog"
	"time"
)

// watchdog feeds systemd's watchdog (the unit's WatchdogSec=) while the
// daemon is well: every period it runs check, and pings once check has
// returned. check is daemon.Probe, which takes every lock a command or a
// MAD takes and none that a client can hold. So a deadlock stops the
// pings, and systemd restarts ucmd after WatchdogSec, with SIGABRT by
// default, whose dump of every goroutine goes to the journal; no client
// can bring that about by being slow.
//
// A check that has not returned after a period is logged once; no other
// check starts until it returns, and pings resume only then.
func watchdog(ctx context.Context, period time.Duration, check func(), ping func() error, log *slog.Logger) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		start := time.Now()
		done := make(chan struct{})
		go func() {
			defer close(done)
			check()
		}()
		select {
		case <-ctx.Done():
			return
		case <-done:
		case <-time.After(period):
			log.Error("health check for systemd's watchdog has not returned: not pinging it, so systemd will restart ucmd", "waited", period)
			select {
			case <-ctx.Done():
				return
			case <-done:
				log.Warn("health check for systemd's watchdog returned late", "took", time.Since(start).Round(time.Millisecond))
			}
		}
		if err := ping(); err != nil {
			log.Warn("sd_notify WATCHDOG=1", "err", err)
		}
	}
}
