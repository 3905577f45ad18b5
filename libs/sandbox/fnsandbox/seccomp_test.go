package main

import (
	"encoding/binary"
	"runtime"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// seccompData is struct seccomp_data as a filter reads it on a
// little-endian machine: nr, arch, the instruction pointer, then each
// argument's low half and high half. The kernel's loads of 32-bit words are
// in the machine's order, a packet filter machine's in network order: each
// word is written in network order here, so that the test machine loads
// the values the kernel would.
func seccompData(arch, nr uint32, args ...uint64) []byte {
	b := make([]byte, 64)
	binary.BigEndian.PutUint32(b[0:], nr)
	binary.BigEndian.PutUint32(b[4:], arch)
	for i, a := range args {
		binary.BigEndian.PutUint32(b[16+8*i:], uint32(a))
		binary.BigEndian.PutUint32(b[20+8*i:], uint32(a>>32))
	}
	return b
}

// The filter's program, run by a BPF machine on the calls a function could
// make: what it refuses, in every ABI of this architecture, and what it
// lets through.
func TestCallFilterProgram(t *testing.T) {
	calls, err := filteredCalls()
	require.NoError(t, err)
	raw := filterProgram(calls)
	insns := make([]bpf.Instruction, len(raw))
	for i, r := range raw {
		insns[i] = bpf.RawInstruction{Op: r.Code, Jt: r.Jt, Jf: r.Jf, K: r.K}.Disassemble()
	}
	vm, err := bpf.NewVM(insns)
	require.NoError(t, err, "a valid program (jumps within it, ends in returns)")
	judge := func(data []byte) uint32 {
		out, err := vm.Run(data)
		require.NoError(t, err)
		return uint32(out)
	}
	const allow = unix.SECCOMP_RET_ALLOW
	newLimit, oldLimit := uint64(0x7fff0000_1000), uint64(0x7fff0000_2000)
	for arch, c := range calls {
		for _, nr := range c.prlimit {
			assert.Equal(t, deny, judge(seccompData(arch, nr, 4242, unix.RLIMIT_NOFILE, newLimit, 0)), "arch %#x nr %d: another process's limit", arch, nr)
			assert.Equal(t, deny, judge(seccompData(arch, nr, 4242, unix.RLIMIT_NOFILE, 0x1000, 0)), "arch %#x nr %d: a pointer with a zero high half", arch, nr)
			assert.Equal(t, deny, judge(seccompData(arch, nr, 4242, unix.RLIMIT_NOFILE, 0x7fff_00000000, 0)), "arch %#x nr %d: a pointer with a zero low half", arch, nr)
			assert.Equal(t, uint32(allow), judge(seccompData(arch, nr, 0, unix.RLIMIT_NOFILE, newLimit, 0)), "arch %#x nr %d: its own limit", arch, nr)
			assert.Equal(t, uint32(allow), judge(seccompData(arch, nr, 4242, unix.RLIMIT_NOFILE, 0, oldLimit)), "arch %#x nr %d: reading another's", arch, nr)
		}
		for _, nr := range c.ipc {
			assert.Equal(t, deny, judge(seccompData(arch, nr, 0, 4096, 0o600)), "arch %#x nr %d: IPC", arch, nr)
		}
		// Calls next to them, and others, are let through.
		var others []uint32
		for _, nr := range append(slices.Clone(c.ipc), c.prlimit...) {
			others = append(others, nr-1, nr+1)
		}
		for _, nr := range append(others, 0, 1, 2, 59, 231) {
			if !slices.Contains(c.ipc, nr) && !slices.Contains(c.prlimit, nr) {
				assert.Equal(t, uint32(allow), judge(seccompData(arch, nr, 1, 2, 3)), "arch %#x nr %d", arch, nr)
			}
		}
	}
	// Another ABI's calls are its block's, or allowed.
	assert.Equal(t, uint32(allow), judge(seccompData(0x12345678, 302, 4242, 7, newLimit)))
}

// The native ABI's numbers are the system's own.
func TestCallFilterNativeNumbers(t *testing.T) {
	calls, err := filteredCalls()
	require.NoError(t, err)
	native := map[string]uint32{"amd64": unix.AUDIT_ARCH_X86_64, "arm64": unix.AUDIT_ARCH_AARCH64}[runtime.GOARCH]
	c, ok := calls[native]
	require.True(t, ok, "a block for the native ABI")
	assert.Contains(t, c.prlimit, uint32(unix.SYS_PRLIMIT64))
	for _, nr := range []uintptr{
		unix.SYS_SHMGET, unix.SYS_SHMAT, unix.SYS_SHMCTL, unix.SYS_SHMDT,
		unix.SYS_SEMGET, unix.SYS_SEMOP, unix.SYS_SEMCTL, unix.SYS_SEMTIMEDOP,
		unix.SYS_MSGGET, unix.SYS_MSGSND, unix.SYS_MSGRCV, unix.SYS_MSGCTL,
		unix.SYS_MQ_OPEN, unix.SYS_MQ_UNLINK, unix.SYS_MQ_TIMEDSEND, unix.SYS_MQ_TIMEDRECEIVE, unix.SYS_MQ_NOTIFY, unix.SYS_MQ_GETSETATTR,
	} {
		assert.Contains(t, c.ipc, uint32(nr))
	}
}
