package operator

import (
	"bufio"
	"bytes"
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
)

// MemoryLimit is the memory the operator's process may use, as
// DetectMemoryLimit found it.
type MemoryLimit struct {
	// Bytes is the limit.
	Bytes int64
	// Source says where it comes from: "cgroup v2 memory.max", "cgroup v1
	// memory.limit_in_bytes", "GOMEMLIMIT" or "the machine's memory
	// (no container limit)".
	Source string
}

// DefaultMemoryBudgetPercent is the share of the operator's memory limit
// that the guest memory budget defaults to (Options.MemoryBudget): the
// rest is for the operator itself (its informer caches, the compiled code
// of its modules, the Go heap).
const DefaultMemoryBudgetPercent = 75

// DetectMemoryLimit finds the memory limit of this process: its cgroup's
// (v2, then v1), else the Go runtime's soft limit (GOMEMLIMIT, which the
// shipped Deployment sets to the container's limit), else the machine's
// memory.
func DetectMemoryLimit() MemoryLimit {
	if b, ok := cgroupLimit(); ok {
		return b
	}
	if l := debug.SetMemoryLimit(-1); l > 0 && l < math.MaxInt64 {
		return MemoryLimit{Bytes: l, Source: "GOMEMLIMIT"}
	}
	return MemoryLimit{Bytes: machineMemory(), Source: "the machine's memory (no container limit)"}
}

// cgroupLimit reads the memory limit of this process's cgroup, at the path
// /proc/self/cgroup names and at the root of the mount (a container sees
// its own cgroup there).
func cgroupLimit() (MemoryLimit, bool) {
	paths := map[string]string{} // controller ("" for v2) -> path
	if b, err := os.ReadFile("/proc/self/cgroup"); err == nil {
		s := bufio.NewScanner(bytes.NewReader(b))
		for s.Scan() {
			parts := strings.SplitN(s.Text(), ":", 3)
			if len(parts) != 3 {
				continue
			}
			for _, c := range strings.Split(parts[1], ",") {
				paths[c] = parts[2]
			}
		}
	}
	for _, dir := range []string{filepath.Join("/sys/fs/cgroup", paths[""]), "/sys/fs/cgroup"} {
		if v, ok := readLimit(filepath.Join(dir, "memory.max")); ok {
			return MemoryLimit{Bytes: v, Source: "cgroup v2 memory.max"}, true
		}
	}
	for _, dir := range []string{filepath.Join("/sys/fs/cgroup/memory", paths["memory"]), "/sys/fs/cgroup/memory"} {
		if v, ok := readLimit(filepath.Join(dir, "memory.limit_in_bytes")); ok {
			return MemoryLimit{Bytes: v, Source: "cgroup v1 memory.limit_in_bytes"}, true
		}
	}
	return MemoryLimit{}, false
}

// readLimit reads a cgroup memory limit file: a number of bytes, or "max"
// (or, in v1, a number near 2^63) for none.
func readLimit(path string) (int64, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || v <= 0 || v >= 1<<62 {
		return 0, false
	}
	return v, true
}

// machineMemory is MemTotal of /proc/meminfo, or 4 GiB when it cannot be
// read.
func machineMemory() int64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err == nil {
		s := bufio.NewScanner(bytes.NewReader(b))
		for s.Scan() {
			f := strings.Fields(s.Text())
			if len(f) >= 2 && f[0] == "MemTotal:" {
				if kb, err := strconv.ParseInt(f[1], 10, 64); err == nil {
					return kb << 10
				}
			}
		}
	}
	return 4 << 30
}
