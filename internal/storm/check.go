package storm

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// checks gathers what is wrong with a storm's settings, named by the
// flags of `ucmd bench` that set them. A negative spread reached
// rand.Int64N (a panic); an accept rate of 1e9 per second or more made a
// zero tick that re-armed itself within one Advance (a hang no context
// could end).
type checks []error

// ErrSettings is wrapped by every error about a storm's settings, as
// opposed to its run: the command line's mistake (ucmd bench exits 64).
var ErrSettings = errors.New("bad settings")

func (c *checks) nonNegative(flag string, d time.Duration) {
	if d < 0 {
		*c = append(*c, fmt.Errorf("--%s %v: cannot be negative", flag, d))
	}
}

func (c *checks) count(flag string, n int) {
	if n < 0 {
		*c = append(*c, fmt.Errorf("--%s %d: cannot be negative", flag, n))
	}
}

func (c *checks) probability(flag string, p float64) {
	if !(p >= 0 && p <= 1) {
		*c = append(*c, fmt.Errorf("--%s %v: want a probability from 0 to 1", flag, p))
	}
}

// MaxAcceptRate bounds a listener storm's accept rate: each accept is a
// simulated timer, 1 µs apart at this rate.
const MaxAcceptRate = 1e6

func (c *checks) rate(flag string, r float64) {
	if math.IsNaN(r) || r < 0 || r > MaxAcceptRate {
		*c = append(*c, fmt.Errorf("--%s %v: want 0 to %v per second", flag, r, MaxAcceptRate))
	}
}

func (c checks) err() error {
	if len(c) == 0 {
		return nil
	}
	return fmt.Errorf("storm: %w%w", errors.Join(c...), quietErr{ErrSettings})
}

// quietErr wraps an error without adding to the message.
type quietErr struct{ err error }

func (q quietErr) Error() string { return "" }
func (q quietErr) Unwrap() error { return q.err }

// settings is an error about a storm's settings.
func settings(format string, args ...any) error {
	return fmt.Errorf("storm: "+format+"%w", append(args, quietErr{ErrSettings})...)
}

// fabric checks the settings both storms give the simulated fabric.
func (c *checks) fabric(latency, jitter time.Duration, loss float64, queue int, deadline time.Duration) {
	c.nonNegative("latency", latency)
	c.nonNegative("jitter", jitter)
	c.probability("loss", loss)
	c.count("queue", queue)
	c.nonNegative("sim-deadline", deadline)
}

func (cfg *Config) check() error {
	var c checks
	c.count("on-demand", cfg.OnDemand)
	c.nonNegative("on-demand-spread", cfg.OnDemandSpread)
	c.nonNegative("start-spread", cfg.StartSpread)
	c.fabric(cfg.Latency, cfg.Jitter, cfg.Loss, cfg.QueueLen, cfg.Deadline)
	c.probability("duplicate", cfg.Duplicate)
	c.probability("reorder", cfg.Reorder)
	return c.err()
}

func (cfg *ListenerConfig) check() error {
	var c checks
	c.count("requests", cfg.Requests)
	c.nonNegative("within", cfg.Within)
	c.count("senders", cfg.Senders)
	c.rate("accept-rate", cfg.AcceptRate)
	if cfg.MRAServiceTimeout > 31 {
		c = append(c, fmt.Errorf("--mra-timeout %d: want a 5-bit IBTA time, 0 to 31", cfg.MRAServiceTimeout))
	}
	c.count("mra-queue", cfg.MRAQueue)
	c.fabric(cfg.Latency, cfg.Jitter, cfg.Loss, cfg.QueueLen, cfg.Deadline)
	return c.err()
}
