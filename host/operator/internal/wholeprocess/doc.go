// Package wholeprocess holds host/operator's tests that measure the whole test process (goroutines, CPU time, preemptions and latencies beside a spinning guest), so they run alone in their own process. It has no code:
// see the _test.go files, and optest for what the operator's test
// packages share.
package wholeprocess
