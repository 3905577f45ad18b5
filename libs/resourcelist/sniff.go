package resourcelist

import (
	"bytes"
	"fmt"
	"io"
)

// Sniff is a cheap first look at a request body, for a hop that does not
// read the ResourceList itself: it refuses what cannot be a ResourceList —
// empty input, control characters, YAML without a top-level
// "kind: ResourceList" — in one pass, keeping nothing of it. The kind key
// may be quoted and followed by spaces before its colon, and the input may
// start with a byte order mark, as YAML allows. What it refuses, Parse
// refuses too, so it leaves to Parse, without looking further, what a line
// at a time cannot tell:
//   - input in UTF-16, or with Unicode's line breaks (U+0085, U+2028,
//     U+2029) or a byte order mark past its start;
//   - JSON, and a document that is indented, tagged or anchored, or starts
//     on its "---" line;
//   - control characters past the first document, which Parse may not
//     read;
//   - a kind whose value it cannot read on its line: a tag, an anchor, a
//     block or flow value, one on the next line, a double-quoted one with
//     an escape, a quoted one that goes on to the next line;
//   - a kind line longer than it keeps (256 bytes);
//   - no kind key at the start of a line in the first document, or another
//     kind, when a line before starts with a key it cannot read ("?", a
//     tag, an anchor, an alias, a double-quoted key);
//   - another kind, when a line before it has a quote or a bracket, which
//     may open a value that goes on over the kind's line.
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
	n     int64 // bytes seen
	bad   error // first control character
	bom   int   // bytes of a leading byte order mark seen
	first byte  // first byte of content (see noteFirst)
	// Before the first content: firstMid is set past a line's start,
	// firstSkip in a comment or directive line, firstDashes counts a
	// line's leading dashes (a document start marker, or a sequence).
	firstMid    bool
	firstSkip   bool
	firstDashes int
	midLine     bool    // not at the start of a line
	last        [2]byte // the two bytes before this one
	// leave is set by what YAML reads otherwise than a line of bytes at a
	// time: a UTF-16 byte order mark at the start, a UTF-8 one later, a
	// line break of Unicode's (U+0085, U+2028, U+2029). All is left to
	// Parse.
	leave bool
	// A line's start "---" or "...": marker is its character, markerLen
	// how many of it; after the first content, past three of them the
	// first document may have ended (lateDoc: control characters are left
	// to Parse, which may not read them), and with a blank, a line break or
	// the end it has (docEnded: the kind is looked for no further).
	marker    byte
	markerLen int
	lateDoc   bool
	docEnded  bool
	kindLine  []byte
	inKind    bool // collecting a top-level "kind:" line
	kindCut   bool // the kind line was longer than maxKindLine
	kind      []byte
	kindSeen  bool
	// kindUnread is set when the kind's value is not on its line as a
	// plain or quoted scalar: left to Parse.
	kindUnread bool
	// indented is set when the first content is not at a line's start.
	indented bool
	// lineOdd is set when the line starts with a key Sniff cannot read;
	// oddKey when a line before the kind's did.
	lineOdd, oddKey bool
	// lineOpens is set when the line has a quote or a bracket; opens
	// when a line before the kind's had one.
	lineOpens, opens bool
}

// bom is UTF-8's byte order mark, which YAML allows at the start.
const bom = "\xef\xbb\xbf"

// Write never fails; the verdict waits for Close.
func (s *Sniffer) Write(p []byte) (int, error) {
	for i, c := range p {
		if s.kindSeen && s.midLine && s.markerLen == 0 && c >= 0x20 && c < 0x7f {
			// Past the kind, inside a line, printable ASCII changes
			// nothing: the common case, kept short.
			s.last = [2]byte{}
			continue
		}
		if s.settled() {
			break
		}
		pos := s.n + int64(i)
		if pos == int64(s.bom) && pos < int64(len(bom)) && c == bom[pos] {
			s.bom++
			continue // not content; never in last
		}
		if c >= 0x80 {
			s.noteEncoding(pos, c)
		} else {
			s.last = [2]byte{}
		}
		if s.bad == nil && !s.lateDoc && !s.leave && isControl(c) {
			s.bad = fmt.Errorf("%w: not YAML: control character at byte %d", ErrInvalid, pos)
		}
		if s.first == 0 {
			s.noteFirst(c)
		}
		lineStart, lineEnd := !s.midLine, c == '\n' || c == '\r'
		if lineStart || s.markerLen > 0 {
			s.noteMarker(c, lineStart, lineEnd)
		}
		if !s.kindSeen && !s.docEnded && !s.leave {
			s.lookForKind(c, lineStart, lineEnd)
		}
		s.midLine = !lineEnd
	}
	s.n += int64(len(p))
	return len(p), nil
}

// isControl says whether c is a control character YAML refuses.
func isControl(c byte) bool {
	return (c < 0x20 && c != '\t' && c != '\n' && c != '\r') || c == 0x7f
}

// settled says whether nothing later can change the verdict: a control
// character refused; the kind read (or the first document ended) and the
// first document maybe ended, so that later control characters are left
// to Parse; or the input left to Parse before any kind was read.
func (s *Sniffer) settled() bool {
	return s.bad != nil || s.lateDoc && (s.kindSeen || s.docEnded) || s.leave && !s.kindSeen
}

// noteEncoding sets leave on what YAML reads otherwise than Sniff does,
// from c (one of 0x80 and up) and the bytes before it. Only what comes
// before one of these is read as YAML reads it: control characters after
// it are left to Parse, and so is the kind if it was not read before.
func (s *Sniffer) noteEncoding(pos int64, c byte) {
	switch {
	case s.docEnded: // the first document ended before it
	case pos == 1 && (s.last[1] == 0xff && c == 0xfe || s.last[1] == 0xfe && c == 0xff): // UTF-16
		s.leave = true
	case s.last[1] == 0xc2 && c == 0x85: // U+0085
		s.leave = true
	case s.last == [2]byte{0xe2, 0x80} && (c == 0xa8 || c == 0xa9): // U+2028, U+2029
		s.leave = true
	case s.last == [2]byte{0xef, 0xbb} && c == 0xbf: // a byte order mark after the first
		s.leave = true
	}
	s.last = [2]byte{s.last[1], c}
}

// noteMarker follows a line's leading "---" or "..." (see Sniffer).
func (s *Sniffer) noteMarker(c byte, lineStart, lineEnd bool) {
	switch {
	case lineStart && (c == '-' || c == '.'):
		s.marker, s.markerLen = c, 1
	case s.markerLen > 0 && s.markerLen < 3 && c == s.marker:
		s.markerLen++
		if s.markerLen == 3 && s.first != 0 { // after content ("..." is content when none came before)
			s.lateDoc = true
		}
	case s.markerLen == 3 && (c == ' ' || c == '\t' || lineEnd):
		if s.first != 0 {
			s.docEnded = true
		}
		s.markerLen = 0
	default:
		s.markerLen = 0
	}
}

// lookForKind follows the lines until the top-level kind's.
func (s *Sniffer) lookForKind(c byte, lineStart, lineEnd bool) {
	switch {
	case lineEnd:
		if s.inKind {
			s.endKind()
		}
		if !s.kindSeen {
			s.opens = s.opens || s.lineOpens
			s.oddKey = s.oddKey || s.lineOdd
		}
		s.lineOpens, s.lineOdd = false, false
		return
	case lineStart && (c == 'k' || c == '"' || c == '\''):
		s.inKind, s.kindLine, s.kindCut = true, s.kindLine[:0], false
	}
	if c == '"' || c == '\'' || c == '{' || c == '[' {
		s.lineOpens = true
	}
	if lineStart && (c == '?' || c == '!' || c == '&' || c == '*' || c == '"') {
		s.lineOdd = true // a double-quoted key's escapes may spell "kind"
	}
	if s.inKind {
		if len(s.kindLine) < maxKindLine {
			s.kindLine = append(s.kindLine, c)
		} else {
			s.kindCut = true
		}
		if len(s.kindLine) <= len(`"kind"`) && !kindKeyPrefix(s.kindLine) {
			s.inKind = false // a line that starts as a kind key might but is not one
		}
	}
}

// noteFirst looks for the first byte of content, past white space, comment
// and directive lines, and a document start marker ("---").
func (s *Sniffer) noteFirst(c byte) {
	switch {
	case c == '\n' || c == '\r':
		if s.firstDashes == 1 || s.firstDashes == 2 {
			s.first = '-' // "-" or "--": content
			return
		}
		s.firstMid, s.firstSkip, s.firstDashes = false, false, 0
	case s.firstSkip:
	case c == ' ' || c == '\t':
		switch s.firstDashes {
		case 1, 2:
			s.first = '-' // a sequence's entry
		case 3:
			s.firstDashes = 0 // the marker; content may follow on its line
		}
		s.firstMid = true
	case s.firstDashes == 3 || (s.firstDashes > 0 && c != '-'):
		s.first = '-' // "---x", "-x": content
	case !s.firstMid && c == '-':
		s.firstDashes++
	case c == '#' || !s.firstMid && c == '%':
		s.firstSkip = true // a comment (after white space), a directive
	default:
		s.first = c
		s.indented = s.firstMid
	}
}

// kindKeys are the ways a top-level line can name the kind key.
var kindKeys = [][]byte{[]byte("kind"), []byte(`"kind"`), []byte("'kind'")}

// kindKeyPrefix says whether line, short, can still become a kind key.
func kindKeyPrefix(line []byte) bool {
	for _, k := range kindKeys {
		if bytes.HasPrefix(k, line) || bytes.HasPrefix(line, k) {
			return true
		}
	}
	return false
}

// endKind ends a line that began like a kind key; it is the kind if it is
// one: the key, spaces, a colon.
func (s *Sniffer) endKind() {
	s.inKind = false
	var v []byte
	key, plain := false, false
	for _, k := range kindKeys {
		if rest, ok := bytes.CutPrefix(s.kindLine, k); ok {
			v, key, plain = bytes.TrimLeft(rest, " \t"), true, k[0] == 'k'
			break
		}
	}
	v, ok := bytes.CutPrefix(v, []byte(":"))
	if !ok {
		if key && s.kindCut && len(v) == 0 {
			s.kindLeft() // its colon may be past what was kept
		}
		return
	}
	if len(v) > 0 && v[0] != ' ' && v[0] != '\t' {
		// A colon ends a plain key only before a blank ("kind:x: 1" is
		// the key "kind:x"); after a quoted one, it may not need one.
		if !plain {
			s.kindLeft()
		}
		return
	}
	if s.kindCut {
		s.kindLeft() // its value goes on past what was kept
		return
	}
	// A comment starts at a "#" after white space.
	for i := 1; i < len(v); i++ {
		if v[i] == '#' && (v[i-1] == ' ' || v[i-1] == '\t') {
			v = v[:i]
			break
		}
	}
	v = bytes.TrimSpace(v)
	if len(v) == 0 || bytes.IndexByte([]byte("!&*|>[{"), v[0]) >= 0 {
		s.kindLeft()
		return
	}
	s.kindSeen = true
	if q := v[0]; q == '"' || q == '\'' {
		// Read to its closing quote: a double-quoted value with an
		// escape, a single-quoted one with a quote in it ('') or either
		// going on to the next line is left to Parse.
		end := bytes.IndexByte(v[1:], q)
		if end < 0 || q == '"' && bytes.IndexByte(v[1:1+end], '\\') >= 0 || q == '\'' && bytes.HasPrefix(v[1+end+1:], []byte{q}) {
			s.kindLeft()
			return
		}
		s.kind = v[1 : 1+end]
		return
	}
	s.kind = v
}

// kindLeft marks the kind line found but its value left to Parse.
func (s *Sniffer) kindLeft() { s.kindSeen, s.kindUnread = true, true }

// Close gives the verdict on everything written.
func (s *Sniffer) Close() error {
	if s.bad != nil {
		return s.bad
	}
	if s.leave && !s.kindSeen {
		return nil
	}
	if s.first == 0 && (s.firstDashes == 1 || s.firstDashes == 2) {
		s.first = '-'
	}
	if s.first == 0 {
		return fmt.Errorf("%w: empty input", ErrInvalid)
	}
	if s.first == '{' || s.first == '[' || s.first == '!' || s.first == '&' || s.indented {
		return nil // JSON, a flow mapping, a tagged, anchored or indented document: left to Parse
	}
	if s.inKind {
		s.endKind()
	}
	switch {
	case s.kindUnread:
		return nil // a kind it cannot read: left to Parse
	case !s.kindSeen && (s.oddKey || s.lineOdd), s.kindSeen && string(s.kind) != Kind && (s.oddKey || s.opens):
		return nil // a line before may hold the kind, or open a value over the kind's line: left to Parse
	case !s.kindSeen:
		return fmt.Errorf("%w: no top-level kind: %s", ErrInvalid, Kind)
	case string(s.kind) != Kind:
		return fmt.Errorf("%w: kind is %q, want %q", ErrInvalid, s.kind, Kind)
	}
	return nil
}
