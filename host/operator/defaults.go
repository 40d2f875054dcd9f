package operator

import (
	"time"

	"github.com/wasmreconcile/wasmreconcile/host/informer"
	"github.com/wasmreconcile/wasmreconcile/host/internal/flightrecorder"
	"github.com/wasmreconcile/wasmreconcile/host/internal/modulecontroller"
	"github.com/wasmreconcile/wasmreconcile/host/internal/supervisor"
	"github.com/wasmreconcile/wasmreconcile/host/source"
)

// Defaults of Options and ManagerOptions: what a zero field takes (those of
// Options.Policy are package policy's). The operator binary's flags take
// their defaults from these, so a flag and the library cannot disagree.
const (
	DefaultKeepVersions         = supervisor.DefaultKeepVersions
	DefaultMaxModuleBytes       = source.DefaultMaxBytes
	DefaultModuleDirSettle      = source.Settle
	DefaultModuleFetchTimeout   = source.DefaultURLTimeout
	DefaultModuleStatusInterval = modulecontroller.DefaultStatusInterval
	DefaultModuleLoadWorkers    = modulecontroller.DefaultWorkers
	DefaultHealthInterval       = supervisor.DefaultHealthInterval
	DefaultSyncTimeout          = supervisor.DefaultSyncTimeout
	DefaultStaleAfter           = supervisor.DefaultStaleAfter

	DefaultFlightRecorderFailures    = flightrecorder.DefaultFailures
	DefaultFlightRecorderSuccesses   = flightrecorder.DefaultSuccesses
	DefaultFlightRecorderSampleEvery = flightrecorder.DefaultSampleEvery
	// DefaultFlightRecorderSampleInterval is FlightRecorderOptions.SampleInterval's default.
	DefaultFlightRecorderSampleInterval = flightrecorder.DefaultSampleInterval
	DefaultFlightRecorderMaxBytes       = flightrecorder.DefaultMaxBytes
	DefaultFlightRecorderQueueSize      = flightrecorder.DefaultQueueSize

	DefaultListPageSize  = informer.DefaultPageSize
	DefaultListTimeout   = informer.DefaultListTimeout
	DefaultLeaseDuration = 15 * time.Second
	DefaultRenewDeadline = 10 * time.Second
	DefaultRetryPeriod   = 2 * time.Second
)
