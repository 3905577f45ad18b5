package resourcelist

import (
	"bytes"
	"fmt"
	"io"
)

// Sniff is a cheap first look at a request body, for a hop that does not
// read the ResourceList itself: it refuses what cannot be a ResourceList —
// empty input, control characters, YAML without a top-level
// "kind: ResourceList" — in one pass, keeping nothing of it. It accepts
// JSON without looking further. What it refuses, Parse refuses too.
func Sniff(data []byte) error {
	var s Sniffer
	s.Write(data)
	return s.Close()
}

// SniffFrom is Sniff over everything r gives.
func SniffFrom(r io.Reader) error {
	var s Sniffer
	if _, err := io.Copy(&s, r); err != nil {
		return fmt.Errorf("reading the ResourceList: %w", err)
	}
	return s.Close()
}

// maxKindLine bounds how much of a top-level "kind:" line is kept.
const maxKindLine = 256

// Sniffer is Sniff over input that comes in pieces (gRPC's buffers, a
// pipe): Write each piece in order, then Close gives the verdict. The zero
// value is ready to use.
type Sniffer struct {
	n        int64 // bytes seen
	bad      error // first control character
	first    byte  // first byte that is not white space
	midLine  bool  // not at the start of a line
	kindLine []byte
	inKind   bool // collecting a top-level "kind:" line
	kind     []byte
	kindSeen bool
}

// Write never fails; the verdict waits for Close.
func (s *Sniffer) Write(p []byte) (int, error) {
	for i, c := range p {
		if s.bad == nil && (c < 0x20 && c != '\t' && c != '\n' && c != '\r' || c == 0x7f) {
			s.bad = fmt.Errorf("%w: not YAML: control character at byte %d", ErrInvalid, s.n+int64(i))
		}
		if s.first == 0 && c != ' ' && c != '\t' && c != '\n' && c != '\r' {
			s.first = c
		}
		if s.kindSeen {
			continue
		}
		switch {
		case c == '\n':
			if s.inKind {
				s.endKind()
			}
			s.midLine = false
			continue
		case !s.midLine && c == 'k':
			s.inKind, s.kindLine = true, s.kindLine[:0]
		}
		s.midLine = true
		if s.inKind {
			if len(s.kindLine) < maxKindLine {
				s.kindLine = append(s.kindLine, c)
			}
			if len(s.kindLine) <= len("kind:") && !bytes.HasPrefix([]byte("kind:"), s.kindLine) {
				s.inKind = false // a line that starts with k but is not "kind:"
			}
		}
	}
	s.n += int64(len(p))
	return len(p), nil
}

// endKind ends a line that began with "k"; it is the kind if it is "kind:".
func (s *Sniffer) endKind() {
	s.inKind = false
	v, ok := bytes.CutPrefix(s.kindLine, []byte("kind:"))
	if !ok {
		return
	}
	if i := bytes.Index(v, []byte(" #")); i >= 0 {
		v = v[:i]
	}
	s.kind = bytes.Trim(bytes.TrimSpace(v), `"'`)
	s.kindSeen = true
}

// Close gives the verdict on everything written.
func (s *Sniffer) Close() error {
	if s.bad != nil {
		return s.bad
	}
	if s.first == 0 {
		return fmt.Errorf("%w: empty input", ErrInvalid)
	}
	if s.first == '{' || s.first == '[' {
		return nil // JSON or a flow mapping: left to Parse
	}
	if s.inKind {
		s.endKind()
	}
	if !s.kindSeen {
		return fmt.Errorf("%w: no top-level kind: %s", ErrInvalid, Kind)
	}
	if string(s.kind) != Kind {
		return fmt.Errorf("%w: kind is %q, want %q", ErrInvalid, s.kind, Kind)
	}
	return nil
}
