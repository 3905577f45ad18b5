package main

import (
	"errors"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Landlock access rights this helper handles, by the ABI version that
// brought them (later versions' rights are left unhandled, so allowed).
const (
	fsV1 = unix.LANDLOCK_ACCESS_FS_EXECUTE | unix.LANDLOCK_ACCESS_FS_WRITE_FILE |
		unix.LANDLOCK_ACCESS_FS_READ_FILE | unix.LANDLOCK_ACCESS_FS_READ_DIR |
		unix.LANDLOCK_ACCESS_FS_REMOVE_DIR | unix.LANDLOCK_ACCESS_FS_REMOVE_FILE |
		unix.LANDLOCK_ACCESS_FS_MAKE_CHAR | unix.LANDLOCK_ACCESS_FS_MAKE_DIR |
		unix.LANDLOCK_ACCESS_FS_MAKE_REG | unix.LANDLOCK_ACCESS_FS_MAKE_SOCK |
		unix.LANDLOCK_ACCESS_FS_MAKE_FIFO | unix.LANDLOCK_ACCESS_FS_MAKE_BLOCK |
		unix.LANDLOCK_ACCESS_FS_MAKE_SYM
	fsRead = unix.LANDLOCK_ACCESS_FS_EXECUTE | unix.LANDLOCK_ACCESS_FS_READ_FILE | unix.LANDLOCK_ACCESS_FS_READ_DIR
	// fsFile are the rights that apply to a file (the others only to
	// directories, and a file's rule may not name them).
	fsFile = unix.LANDLOCK_ACCESS_FS_EXECUTE | unix.LANDLOCK_ACCESS_FS_WRITE_FILE |
		unix.LANDLOCK_ACCESS_FS_READ_FILE | unix.LANDLOCK_ACCESS_FS_TRUNCATE |
		unix.LANDLOCK_ACCESS_FS_IOCTL_DEV
	netTCP = unix.LANDLOCK_ACCESS_NET_BIND_TCP | unix.LANDLOCK_ACCESS_NET_CONNECT_TCP
	// MinLandlockABI is the first ABI with TCP rules: below it the layer
	// counts as missing, since it could not deny the network.
	minLandlockABI = 4
	ruleNetPort    = 2 // LANDLOCK_RULE_NET_PORT
)

// handled is what a ruleset handles on a kernel with Landlock ABI abi.
func handled(abi int) unix.LandlockRulesetAttr {
	attr := unix.LandlockRulesetAttr{Access_fs: fsV1}
	if abi >= 2 {
		attr.Access_fs |= unix.LANDLOCK_ACCESS_FS_REFER
	}
	if abi >= 3 {
		attr.Access_fs |= unix.LANDLOCK_ACCESS_FS_TRUNCATE
	}
	if abi >= 4 {
		attr.Access_net = netTCP
	}
	if abi >= 5 {
		attr.Access_fs |= unix.LANDLOCK_ACCESS_FS_IOCTL_DEV
	}
	if abi >= 6 {
		attr.Scoped = unix.LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET | unix.LANDLOCK_SCOPE_SIGNAL
	}
	return attr
}

// landlockABI is the kernel's Landlock ABI version, or an error saying why
// there is none.
func landlockABI() (int, error) {
	v, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
	if errno != 0 {
		if errno == unix.ENOSYS || errno == unix.EOPNOTSUPP {
			return 0, fmt.Errorf("not in this kernel or not enabled at boot (%w)", errno)
		}
		return 0, errno
	}
	return int(v), nil
}

// restrictThread confines the calling thread, and so what it starts: files
// only below readOnly (read, execute) and readWrite (everything), TCP connect
// only to connectPorts (or anywhere with anyConnect), no TCP bind, and (ABI 6) no signals or abstract
// sockets out of the sandbox. The caller has set no_new_privs and holds the
// thread locked.
func restrictThread(readOnly, readWrite []string, connectPorts []uint16, anyConnect bool) error {
	abi, err := landlockABI()
	if err != nil {
		return fmt.Errorf("landlock: %w", err)
	}
	if abi < minLandlockABI {
		return fmt.Errorf("landlock: ABI %d has no TCP rules (%d needed)", abi, minLandlockABI)
	}
	attr := handled(abi)
	if anyConnect {
		attr.Access_net &^= unix.LANDLOCK_ACCESS_NET_CONNECT_TCP
		connectPorts = nil
	}
	fd, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr), 0)
	if errno != 0 {
		return fmt.Errorf("landlock ruleset: %w", errno)
	}
	defer unix.Close(int(fd))
	for _, p := range readOnly {
		if err := allowPath(int(fd), p, fsRead&attr.Access_fs); err != nil {
			return err
		}
	}
	for _, p := range readWrite {
		if err := allowPath(int(fd), p, attr.Access_fs); err != nil {
			return err
		}
	}
	for _, port := range connectPorts {
		rule := struct{ allowed, port uint64 }{unix.LANDLOCK_ACCESS_NET_CONNECT_TCP, uint64(port)}
		if _, _, errno := unix.Syscall6(unix.SYS_LANDLOCK_ADD_RULE, fd, ruleNetPort, uintptr(unsafe.Pointer(&rule)), 0, 0, 0); errno != 0 {
			return fmt.Errorf("landlock: allowing TCP port %d: %w", port, errno)
		}
	}
	if _, _, errno := unix.Syscall(unix.SYS_LANDLOCK_RESTRICT_SELF, fd, 0, 0); errno != 0 {
		return fmt.Errorf("landlock: restricting: %w", errno)
	}
	return nil
}

// allowPath adds a rule granting access below path; a missing path, or one
// the process may not reach anyway (inside namespaces, as the call's uid), is
// skipped; a file gets only the rights that apply to files.
func allowPath(ruleset int, path string, access uint64) error {
	fd, err := unix.Open(path, unix.O_PATH|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.EACCES) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("landlock: opening %s: %w", path, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("landlock: %s: %w", path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		access &= fsFile
	}
	rule := unix.LandlockPathBeneathAttr{Allowed_access: access, Parent_fd: int32(fd)}
	if _, _, errno := unix.Syscall6(unix.SYS_LANDLOCK_ADD_RULE, uintptr(ruleset), unix.LANDLOCK_RULE_PATH_BENEATH, uintptr(unsafe.Pointer(&rule)), 0, 0, 0); errno != 0 {
		return fmt.Errorf("landlock: allowing %s: %w", path, errno)
	}
	return nil
}

// landlockFinding says whether the Landlock layer is available.
func landlockFinding() (bool, string) {
	abi, err := landlockABI()
	if err != nil {
		return false, err.Error()
	}
	if abi < minLandlockABI {
		return false, fmt.Sprintf("ABI %d has no TCP rules (%d needed)", abi, minLandlockABI)
	}
	return true, fmt.Sprintf("ABI %d", abi)
}
