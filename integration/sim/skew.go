package sim

import (
	"math"
	"time"

	"github.com/baton-run/baton/clock"
)

// Clock skew: a process's injected clock may run at a seeded rate of the bubble's (real) time. Its
// Now reads origin + rate × (real time since origin), and its timers, tickers and AfterFuncs of d
// fire after d/rate of real time. Everything a process schedules on its clock (the election's
// keepalive pacing and local lease deadline, retries, the leader's own work) drifts with it; etcd's
// model expires leases on real time, as a server whose clock is right would. Timer channels still
// carry the bubble's time: no library code reads the value it receives.
//
// The bound: the election ends a term SafetyMargin before the local deadline, sent + TTL read on the
// process's clock. That is before etcd's expiry (at least sent + TTL of real time) as long as
// (TTL - SafetyMargin)/rate <= TTL, that is rate >= 1 - SafetyMargin/TTL (0.75 with the default
// margin of TTL/4). A slower clock breaks fail-closed: TestSimElectionSkewBeyondBound shows it. The
// leader's work after its term ended (the callback's last calls, which the lost session's revoke
// waits for) must also end before etcd's expiry: with w of it on the process's clock, rate >=
// (TTL - SafetyMargin)/(TTL - w), 0.857 for the election world's w of at most SafetyMargin/2 (at
// 0.80 the world sees a successor elected while that callback runs).
type skew struct {
	rate   float64 // 0 or 1: no skew
	origin time.Time
}

// MinClockRate is the slowest clock rate the election's fail-closed guarantee holds for with its
// default SafetyMargin of TTL/4 (see skew).
const MinClockRate = 0.75

// setSkew makes the clock run at rate from now on.
func (c *nodeClock) setSkew(rate float64) {
	c.sk = skew{rate: rate, origin: c.Clock.Now()}
}

func (c *nodeClock) skewed() bool { return c.sk.rate != 0 && c.sk.rate != 1 }

// Now is the process's reading of the time.
func (c *nodeClock) Now() time.Time {
	now := c.Clock.Now()
	if !c.skewed() {
		return now
	}
	return c.sk.origin.Add(time.Duration(float64(now.Sub(c.sk.origin)) * c.sk.rate))
}

// toReal is the bubble's time at which the process's clock reads t.
func (c *nodeClock) toReal(t time.Time) time.Time {
	if !c.skewed() {
		return t
	}
	return c.sk.origin.Add(time.Duration(float64(t.Sub(c.sk.origin)) / c.sk.rate))
}

// real is how long d on the process's clock lasts in the bubble's time.
func (c *nodeClock) real(d time.Duration) time.Duration {
	if !c.skewed() {
		return d
	}
	if r := float64(d) / c.sk.rate; r < math.MaxInt64 {
		return time.Duration(r)
	}
	return math.MaxInt64 // a "never" timer stays one (a float beyond int64 converts to a negative)
}

func (c *nodeClock) NewTimer(d time.Duration) clock.Timer {
	return skewTimer{c.Clock.NewTimer(c.real(d)), c}
}

func (c *nodeClock) AfterFunc(d time.Duration, f func()) clock.Timer {
	return skewTimer{c.Clock.AfterFunc(c.real(d), f), c}
}

func (c *nodeClock) NewTicker(d time.Duration) clock.Ticker {
	return skewTicker{c.Clock.NewTicker(c.real(d)), c}
}

type skewTimer struct {
	clock.Timer
	c *nodeClock
}

func (t skewTimer) Reset(d time.Duration) bool { return t.Timer.Reset(t.c.real(d)) }

type skewTicker struct {
	clock.Ticker
	c *nodeClock
}

func (t skewTicker) Reset(d time.Duration) { t.Ticker.Reset(t.c.real(d)) }
