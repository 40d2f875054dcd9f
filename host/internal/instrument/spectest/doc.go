// Package spectest runs the WebAssembly spec suite (wazero's copy, from
// the module cache) through the instrumenter and the meter: every valid
// module is instrumented, instantiated and run, every invalid one refused.
// It holds tests only. `make test` runs it without the race detector: the
// suite is single-threaded, so -race finds nothing in it and makes it
// about six times slower.
package spectest
