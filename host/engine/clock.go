package engine

import (
	"context"

	"github.com/wasmreconcile/wasmreconcile/host/internal/meter"
)

// NanosPerFuel is how far a guest's clock advances per unit of fuel it
// uses: 1 ns. The measured cost of a unit is about 0.16 ns (docs/metering.md),
// so a guest's clock runs a few times faster than real time, and exactly as
// fast in every process: the same calls read the same times.
const NanosPerFuel = 1

// fuelClock is an instance's clock (WASI clock_time_get, monotonic and
// realtime alike): it advances with the fuel the instance has used, across
// all its calls, so it is deterministic and moves with the guest's work.
//
// wazero's default fake clock advances 1 ms per reading instead, whatever
// ran in between. A Go guest reads its clock rarely (measured: 402 readings
// in 5,000 widget calls), mostly around its garbage collections, so under
// that clock every interval it measures is 1 ms: a collection seems to take
// as long as the work between two collections, about half of all time.
// The Go runtime's GC CPU limiter accumulates GC time over 50% in a bucket
// of one CPU-second; once it fills, the limiter turns off GC assists and the
// heap outgrows its goal. Measured with the widget guest on one instance
// (issue 13): memory stayed at 7.8 MiB for 20,000 calls (about 1,700
// readings: 1.7 s of fake time, the bucket filling), then grew by about
// 15 MiB per 1,000 calls, fuel per call up from 836k to 1.19M, until the
// 128 MiB cap at call 29,400. With 1 µs per reading it stayed flat through
// 60,000 calls (the bucket fills 1,000 times more slowly); with this clock,
// which measures work, it stays at 7.9 MiB and 766k fuel per call through
// 200,000 calls (BenchmarkSoak), and it is deterministic.
//
// An instance serves one call at a time, so the clock needs no lock.
type fuelClock struct {
	base int64 // nanoseconds of the calls finished
	last int64 // the last reading: readings strictly increase
	// ctx finds the meter of the call running; nil between calls.
	ctx context.Context
}

// nanotime is the instance's sys.Nanotime.
func (c *fuelClock) nanotime() int64 {
	now := c.base
	if c.ctx != nil {
		if m := meter.FromContext(c.ctx); m != nil {
			now += int64(m.Consumed()) * NanosPerFuel
		}
	}
	if now <= c.last {
		now = c.last + 1
	}
	c.last = now
	return now
}

// walltime is the instance's sys.Walltime: a fixed epoch plus nanotime.
func (c *fuelClock) walltime() (sec int64, nsec int32) {
	t := fuelClockEpoch + c.nanotime()
	return t / 1e9, int32(t % 1e9)
}

// fuelClockEpoch is the guest's wall clock when its instance starts:
// 2000-01-01T00:00:00Z, offline runs' Request.now (guests use Request.now,
// not their clock, for timestamps).
const fuelClockEpoch = 946684800 * int64(1e9)

// enter starts a call whose meter is in ctx; exit ends it, having used fuel.
func (c *fuelClock) enter(ctx context.Context) { c.ctx = ctx }

func (c *fuelClock) exit(fuel uint64) {
	c.ctx = nil
	if end := c.base + int64(fuel)*NanosPerFuel; end > c.last {
		c.base = end
	} else {
		c.base = c.last
	}
}
