package main

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"

	"golang.org/x/sys/unix"
)

// pinDriver confines every thread of the driver to the CPUs it may run on
// except cpu, so that what it starts afterwards (the control plane, and
// the creators, which are its own goroutines) runs there too and leaves
// cpu to the operator processes (-pin-cpu). It fails if cpu is not one
// the driver may run on, or is the only one.
//
// Affinity is per thread and a new thread inherits its creator's, so
// every thread the driver has is pinned, and the walk repeats until a
// pass finds none left unpinned (the runtime may start one meanwhile).
func pinDriver(cpu int) error {
	var all unix.CPUSet
	if err := unix.SchedGetaffinity(0, &all); err != nil {
		return fmt.Errorf("-pin-cpu: reading the driver's CPUs: %w", err)
	}
	if !all.IsSet(cpu) {
		return fmt.Errorf("-pin-cpu %d: the driver may not run on CPU %d", cpu, cpu)
	}
	if all.Count() < 2 {
		return fmt.Errorf("-pin-cpu %d: the driver may run on CPU %d only; pinning needs at least one more", cpu, cpu)
	}
	if _, err := exec.LookPath("taskset"); err != nil {
		return fmt.Errorf("-pin-cpu needs taskset (Debian's util-linux) to start the operators on CPU %d: %w", cpu, err)
	}
	rest := all
	rest.Clear(cpu)
	pinned := map[int]bool{}
	for {
		tasks, err := os.ReadDir("/proc/self/task")
		if err != nil {
			return fmt.Errorf("-pin-cpu: listing the driver's threads: %w", err)
		}
		fresh := 0
		for _, t := range tasks {
			tid, err := strconv.Atoi(t.Name())
			if err != nil || pinned[tid] {
				continue
			}
			if err := unix.SchedSetaffinity(tid, &rest); err != nil && err != unix.ESRCH {
				return fmt.Errorf("-pin-cpu: pinning the driver's thread %d: %w", tid, err)
			}
			pinned[tid] = true
			fresh++
		}
		if fresh == 0 {
			return nil
		}
	}
}

// pinned returns the command that starts bin on cpu alone: taskset and
// the arguments to put before bin's own (taskset execs bin, so the process
// keeps taskset's pid), or bin and no arguments when cpu is negative.
func pinned(cpu int, bin string) (string, []string) {
	if cpu < 0 {
		return bin, nil
	}
	return "taskset", []string{"--cpu-list", strconv.Itoa(cpu), bin}
}
