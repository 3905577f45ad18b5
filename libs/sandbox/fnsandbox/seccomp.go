package main

import (
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The offsets in struct seccomp_data of what the filter reads: the system
// call's number, its ABI, and the low and high halves of its first and
// third arguments (little-endian).
const (
	offNr     = 0
	offArch   = 4
	offArg0Lo = 16
	offArg2Lo = 32
	offArg2Hi = 36
)

// prlimitCalls are prlimit64's numbers on this architecture, by ABI: a
// process may call through another ABI its kernel supports (int 0x80 and
// x32 on x86-64), which the filter must judge too.
func prlimitCalls() (map[uint32][]uint32, error) {
	switch runtime.GOARCH {
	case "amd64":
		return map[uint32][]uint32{
			unix.AUDIT_ARCH_X86_64: {302, 0x40000000 | 302}, // x86-64, x32
			unix.AUDIT_ARCH_I386:   {340},
		}, nil
	case "arm64":
		return map[uint32][]uint32{unix.AUDIT_ARCH_AARCH64: {261}, unix.AUDIT_ARCH_ARM: {369}}, nil
	}
	return nil, fmt.Errorf("no seccomp filter for %s", runtime.GOARCH)
}

// denyPrlimitOfOthers installs, on the calling thread and so on the
// function it starts, a seccomp filter that refuses (EPERM) prlimit64 on
// another process with a new limit: a function of the helper's uid could
// otherwise lower the helper's limits (open files: the helper can no longer
// look for the function's processes, and a setsid escapee outlives the
// call; processes, address space: the helper cannot work). Reading limits,
// and setting its own (pid 0, as setrlimit does), stay allowed. The helper
// sets the function's limits from another thread (see setLimits).
func denyPrlimitOfOthers() error {
	calls, err := prlimitCalls()
	if err != nil {
		return err
	}
	stmt := func(code uint16, k uint32) unix.SockFilter { return unix.SockFilter{Code: code, K: k} }
	jeq := func(k uint32, jt, jf uint8) unix.SockFilter {
		return unix.SockFilter{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, K: k, Jt: jt, Jf: jf}
	}
	const (
		allow = unix.SECCOMP_RET_ALLOW
		deny  = unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)
	)
	load := func(off uint32) unix.SockFilter { return stmt(unix.BPF_LD|unix.BPF_W|unix.BPF_ABS, off) }
	// check judges a prlimit64 call (the accumulator is free).
	check := []unix.SockFilter{
		load(offArg0Lo), jeq(0, 5, 0), // pid 0: itself
		load(offArg2Lo), jeq(0, 0, 2), // a new limit (its pointer's low half)
		load(offArg2Hi), jeq(0, 1, 0), // ... or high half
		stmt(unix.BPF_RET|unix.BPF_K, deny),
		stmt(unix.BPF_RET|unix.BPF_K, allow),
	}
	// Per ABI: load arch, jeq arch (else on to the next ABI's block), load
	// nr, then a jeq per number (with a load between two), each jumping to
	// check when it matches; then allow, and check.
	var prog []unix.SockFilter
	for arch, nrs := range calls {
		block := 1 + (2*len(nrs) - 1) + 1 + len(check) // after the jeq arch
		prog = append(prog, load(offArch), jeq(arch, 0, uint8(block)), load(offNr))
		for i := range nrs {
			// Each remaining nr test is two instructions, the last one
			// is followed by "allow", then check.
			rest := len(nrs) - 1 - i
			prog = append(prog, jeq(nrs[i], uint8(2*rest+1), 0))
			if rest > 0 {
				prog = append(prog, load(offNr))
			}
		}
		prog = append(prog, stmt(unix.BPF_RET|unix.BPF_K, allow))
		prog = append(prog, check...)
	}
	prog = append(prog, stmt(unix.BPF_RET|unix.BPF_K, allow))
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	if err := unix.Prctl(unix.PR_SET_SECCOMP, unix.SECCOMP_MODE_FILTER, uintptr(unsafe.Pointer(&fprog)), 0, 0); err != nil {
		return fmt.Errorf("seccomp filter: %w", err)
	}
	runtime.KeepAlive(prog)
	return nil
}
