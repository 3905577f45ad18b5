package resourcelist

import (
	"bytes"
	"fmt"
)

// Sniff is a cheap first look at a request body, for a hop that forwards
// the bytes without reading them (the gateway): it refuses what cannot be a
// ResourceList — empty input, control characters, YAML without a top-level
// "kind: ResourceList" — in one pass and without allocating. It accepts
// JSON without looking further. Whatever it passes, Parse still checks
// where the ResourceList is used; what it refuses, Parse refuses too.
func Sniff(data []byte) error {
	first := -1
	for i, c := range data {
		if c < 0x20 && c != '\t' && c != '\n' && c != '\r' || c == 0x7f {
			return fmt.Errorf("%w: not YAML: control character at byte %d", ErrInvalid, i)
		}
		if first < 0 && c != ' ' && c != '\t' && c != '\n' && c != '\r' {
			first = i
		}
	}
	if first < 0 {
		return fmt.Errorf("%w: empty input", ErrInvalid)
	}
	if data[first] == '{' || data[first] == '[' {
		return nil // JSON or a flow mapping: left to Parse
	}
	for rest := data; len(rest) > 0; {
		line := rest
		if i := bytes.IndexByte(rest, '\n'); i >= 0 {
			line, rest = rest[:i], rest[i+1:]
		} else {
			rest = nil
		}
		v, ok := bytes.CutPrefix(line, []byte("kind:"))
		if !ok {
			continue
		}
		if i := bytes.Index(v, []byte(" #")); i >= 0 {
			v = v[:i]
		}
		v = bytes.Trim(bytes.TrimSpace(v), `"'`)
		if string(v) == Kind {
			return nil
		}
		return fmt.Errorf("%w: kind is %q, want %q", ErrInvalid, v, Kind)
	}
	return fmt.Errorf("%w: no top-level kind: %s", ErrInvalid, Kind)
}
