package main

import (
	"fmt"
	"maps"
	"math"
	"runtime"
	"slices"
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

// abiCalls are the system call numbers the filter judges in one ABI.
type abiCalls struct {
	// prlimit is prlimit64's.
	prlimit []uint32
	// ipc are System V IPC's and POSIX message queues' (with i386's
	// multiplexer, ipc).
	ipc []uint32
}

// x32 is the bit x32 system calls carry beside x86-64's numbers.
const x32 = 0x40000000

// filteredCalls are the numbers the filter judges on this architecture,
// by ABI: a process may call through another ABI its kernel supports (int
// 0x80 and x32 on x86-64, AArch32 on arm64), which the filter must judge
// too.
func filteredCalls() (map[uint32]abiCalls, error) {
	span := func(from, to uint32) []uint32 {
		var out []uint32
		for nr := from; nr <= to; nr++ {
			out = append(out, nr)
		}
		return out
	}
	switch runtime.GOARCH {
	case "amd64":
		// shmget, shmat, shmctl; semget to msgctl (64-71, with shmdt);
		// semtimedop; the mq_ calls.
		ipc := append(append(span(29, 31), span(64, 71)...), 220)
		ipc = append(ipc, span(240, 245)...)
		withX32 := append([]uint32(nil), ipc...)
		for _, nr := range ipc {
			if nr != 244 { // mq_notify is x32's 527
				withX32 = append(withX32, x32|nr)
			}
		}
		withX32 = append(withX32, x32|527)
		return map[uint32]abiCalls{
			unix.AUDIT_ARCH_X86_64: {prlimit: []uint32{302, x32 | 302}, ipc: withX32},
			// ipc, mq_ calls, the direct System V calls, the time64
			// ones.
			unix.AUDIT_ARCH_I386: {prlimit: []uint32{340}, ipc: append(append(append([]uint32{117}, span(277, 282)...), span(393, 402)...), span(418, 420)...)},
		}, nil
	case "arm64":
		return map[uint32]abiCalls{
			unix.AUDIT_ARCH_AARCH64: {prlimit: []uint32{261}, ipc: span(180, 197)},
			unix.AUDIT_ARCH_ARM:     {prlimit: []uint32{369}, ipc: append(append(append(span(274, 279), span(298, 308)...), 312), span(418, 420)...)},
		}, nil
	}
	return nil, fmt.Errorf("no seccomp filter for %s", runtime.GOARCH)
}

// installCallFilter installs, on the calling thread and so on the function
// it starts, a seccomp filter that refuses (EPERM):
//
//   - prlimit64 on another process with a new limit: a function of the
//     helper's uid could otherwise lower the helper's limits (open files:
//     the helper can no longer look for the function's processes, and a
//     setsid escapee outlives the call; processes, address space: the
//     helper cannot work). Reading limits, and setting its own (pid 0, as
//     setrlimit does), stay allowed. The helper sets the function's limits
//     from another thread (see setLimits).
//   - System V IPC (shared memory, semaphores, message queues) and POSIX
//     message queues: their objects outlive the call, in the runner's IPC
//     namespace (the userns layer alone gives a call one of its own), where
//     they would take up the node's limits and carry data from one call to
//     a later one; nor does a function reach the objects of others.
func installCallFilter() error {
	calls, err := filteredCalls()
	if err != nil {
		return err
	}
	prog := filterProgram(calls)
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	if err := unix.Prctl(unix.PR_SET_SECCOMP, unix.SECCOMP_MODE_FILTER, uintptr(unsafe.Pointer(&fprog)), 0, 0); err != nil {
		return fmt.Errorf("seccomp filter: %w", err)
	}
	runtime.KeepAlive(prog)
	return nil
}

// filterProgram is installCallFilter's program: a block per ABI, then
// "allow" for calls of other ABIs.
func filterProgram(calls map[uint32]abiCalls) []unix.SockFilter {
	var prog []unix.SockFilter
	for _, arch := range slices.Sorted(maps.Keys(calls)) {
		prog = append(prog, abiBlock(arch, calls[arch])...)
	}
	return append(prog, ret(unix.SECCOMP_RET_ALLOW))
}

// deny is the filter's answer to a refused call.
const deny = unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)

func stmt(code uint16, k uint32) unix.SockFilter { return unix.SockFilter{Code: code, K: k} }

func load(off uint32) unix.SockFilter { return stmt(unix.BPF_LD|unix.BPF_W|unix.BPF_ABS, off) }

func ret(k uint32) unix.SockFilter { return stmt(unix.BPF_RET|unix.BPF_K, k) }

// jeq jumps jt instructions ahead when the accumulator is k, else jf.
func jeq(k uint32, jt, jf int) unix.SockFilter {
	if jt > math.MaxUint8 || jf > math.MaxUint8 {
		panic(fmt.Sprintf("seccomp filter: a jump of %d or %d instructions", jt, jf)) // a block grew too long
	}
	return unix.SockFilter{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, K: k, Jt: uint8(jt), Jf: uint8(jf)}
}

// abiBlock judges the calls of one ABI and falls through, to the next
// block, for the calls of others:
//
//	ld arch; jeq arch, else past the block
//	ld nr; jeq each ipc number: deny; jeq each prlimit number: check
//	ret allow
//	ret deny
//	check: pid 0 (itself) or no new limit: allow, else deny
func abiBlock(arch uint32, c abiCalls) []unix.SockFilter {
	const first = 3 // the first number's test
	tests := len(c.ipc) + len(c.prlimit)
	denyAt := first + tests + 1
	checkAt := denyAt + 1
	b := []unix.SockFilter{load(offArch), {}, load(offNr)}
	for _, nr := range c.ipc {
		b = append(b, jeq(nr, denyAt-len(b)-1, 0))
	}
	for _, nr := range c.prlimit {
		b = append(b, jeq(nr, checkAt-len(b)-1, 0))
	}
	b = append(b, ret(unix.SECCOMP_RET_ALLOW), ret(deny),
		load(offArg0Lo), jeq(0, 5, 0), // pid 0: itself
		load(offArg2Lo), jeq(0, 0, 2), // a new limit (its pointer's low half)
		load(offArg2Hi), jeq(0, 1, 0), // ... or high half
		ret(deny),
		ret(unix.SECCOMP_RET_ALLOW),
	)
	b[1] = jeq(arch, 0, len(b)-2) // else to the first instruction after the block
	return b
}
