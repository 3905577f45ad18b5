package resourcelist

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestSniff(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		ok       bool
	}{
		{"ResourceList", "apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems: []\n", true},
		{"quoted kind, comment", "kind: \"ResourceList\" # yes\nitems: []\n", true},
		{"JSON is left to Parse", `{"kind":"ResourceList","items":[]}`, true},
		{"empty", " \n\t", false},
		{"control characters", "kind: ResourceList\n\x00\x01", false},
		{"another kind", "apiVersion: v1\nkind: ConfigMap\n", false},
		{"kind only nested", "items:\n- kind: ResourceList\n", false},
		{"no kind", "items: []\n", false},
		{"kind after other k lines", "kinds: x\nkeep: 1\nkind: ResourceList\n", true},
		{"kind at the very end, no newline", "items: []\nkind: ResourceList", true},
		{"kind key without a colon", "kind\n", false},
		{"spaces before the colon", "apiVersion: config.kubernetes.io/v1\nkind : ResourceList\nitems: []\n", true},
		{"quoted key", "apiVersion: config.kubernetes.io/v1\n\"kind\": ResourceList\nitems: []\n", true},
		{"single-quoted key and value", "apiVersion: config.kubernetes.io/v1\n'kind': 'ResourceList'\nitems: []\n", true},
		{"byte order mark", "\xef\xbb\xbfkind: ResourceList\napiVersion: config.kubernetes.io/v1\nitems: []\n", true},
		{"byte order mark, then JSON", "\xef\xbb\xbf{\"apiVersion\":\"config.kubernetes.io/v1\",\"kind\":\"ResourceList\",\"items\":[]}", true},
		{"CRLF lines", "apiVersion: config.kubernetes.io/v1\r\nkind: ResourceList\r\nitems: []\r\n", true},
		{"tagged kind", "apiVersion: config.kubernetes.io/v1\nkind: !!str ResourceList\nitems: []\n", true},
		{"kind on the next line", "apiVersion: config.kubernetes.io/v1\nkind:\n  ResourceList\nitems: []\n", true},
		{"quoted key, another kind", "\"kind\": ConfigMap\n", false},
		{"a longer key", "kindness: ResourceList\n", false},
		{"a byte order mark later is content", "kind: ResourceList\n\xef\xbb\xbf\n", true},
		{"tab before a comment", "apiVersion: config.kubernetes.io/v1\nkind: ResourceList\t# c\nitems: []\n", true},
		{"quoted, tab before a comment", "apiVersion: config.kubernetes.io/v1\nkind: \"ResourceList\"\t# c\nitems: []\n", true},
		{"CR line ends", "apiVersion: config.kubernetes.io/v1\rkind: ResourceList\ritems: []\r", true},
		{"document start, then JSON", "--- {\"apiVersion\":\"config.kubernetes.io/v1\",\"kind\":\"ResourceList\",\"items\":[]}", true},
		{"comment, then JSON", "# made by hand\n{\"apiVersion\":\"config.kubernetes.io/v1\",\"kind\":\"ResourceList\",\"items\":[]}", true},
		{"directive, document start, flow mapping", "%YAML 1.1\n--- {apiVersion: config.kubernetes.io/v1, kind: ResourceList, items: []}\n", true},
		{"tagged flow mapping", "!!map {apiVersion: config.kubernetes.io/v1, kind: ResourceList, items: []}\n", true},
		{"document start, block mapping", "---\napiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems: []\n", true},
		{"document start, comment, block mapping", "--- # one\napiVersion: config.kubernetes.io/v1\nkind: ResourceList\n", true},
		{"a sequence", "- kind: ResourceList\n", false},
		{"a dash alone", "-", false},
		{"a marker alone", "---\n", false},
		{"a comment alone", "# kind: ResourceList\n", false},
		// What a line at a time cannot tell is left to Parse.
		{"indented document", "  apiVersion: config.kubernetes.io/v1\n  kind: ResourceList\n  items: []\n", true},
		{"a double-quoted value over a kind-like line", "apiVersion: config.kubernetes.io/v1\na: \"x\nkind: ConfigMap\"\nkind: ResourceList\n", true},
		{"a single-quoted value over a kind-like line", "apiVersion: config.kubernetes.io/v1\na: 'x\nkind: ConfigMap'\nkind: ResourceList\n", true},
		{"a flow mapping over a kind-like line", "apiVersion: config.kubernetes.io/v1\na: {b: c,\nkind: ConfigMap}\nkind: ResourceList\n", true},
		{"a flow sequence over a kind-like line", "apiVersion: config.kubernetes.io/v1\na: [b,\nkind: ConfigMap]\nkind: ResourceList\n", true},
		{"a nested quoted value over a kind-like line", "apiVersion: config.kubernetes.io/v1\nm:\n  n: \"x\nkind: ConfigMap\"\nkind: ResourceList\n", true},
		{"explicit key", "apiVersion: config.kubernetes.io/v1\n? kind\n: ResourceList\n", true},
		{"tagged key", "apiVersion: config.kubernetes.io/v1\n!!str kind: ResourceList\n", true},
		{"anchored key", "apiVersion: config.kubernetes.io/v1\n&a kind: ResourceList\n", true},
		{"escaped key", "apiVersion: config.kubernetes.io/v1\n\"k\\x69nd\": ResourceList\n", true},
		{"escaped kind", "apiVersion: config.kubernetes.io/v1\nkind: \"Resource\\x4cist\"\n", true},
		{"kind continued by an escaped line break", "apiVersion: config.kubernetes.io/v1\nkind: \"ResourceL\\\nist\"\n", true},
		{"another kind after a quote", "a: \"x\"\nkind: ConfigMap\n", true},
		{"another kind, quoted, with a quote in it", "kind: 'Config''Map'\n", true},
		{"another kind, a plain line before it", "a: x\nkind: 'ConfigMap' # c\n", false},
		{"no kind, a plain document", "  \napiVersion: v1\nitems: []\n", false},
		{"a line break of Unicode's: U+0085", "apiVersion: config.kubernetes.io/v1\na: b\u0085kind: ResourceList\n", true},
		{"a line break of Unicode's: U+2028", "kind: ResourceList\u2028apiVersion: config.kubernetes.io/v1\n", true},
		{"a line break of Unicode's: U+2029", "# c\u2029kind: ResourceList\napiVersion: config.kubernetes.io/v1\n", true},
		{"byte order marks at the lines' starts", "\ufeff\ufeffkind: ResourceList\n\ufeffapiVersion: config.kubernetes.io/v1\n", true},
		{"UTF-16", "\xff\xfek\x00i\x00n\x00d\x00:\x00 \x00R\x00e\x00s\x00o\x00u\x00r\x00c\x00e\x00L\x00i\x00s\x00t\x00\n\x00a\x00p\x00i\x00V\x00e\x00r\x00s\x00i\x00o\x00n\x00:\x00 \x00c\x00o\x00n\x00f\x00i\x00g\x00.\x00k\x00u\x00b\x00e\x00r\x00n\x00e\x00t\x00e\x00s\x00.\x00i\x00o\x00/\x00v\x001\x00\n\x00", true},
		{"a control character in a later document", "kind: ResourceList\napiVersion: config.kubernetes.io/v1\n---\n-" + strings.Repeat(" ", 452) + "\x00", true},
		{"an explicit key, then another kind", "apiVersion: config.kubernetes.io/v1\n? kind\n: ResourceList\nkind: x\n", true},
		{"a tagged key, then another kind", "apiVersion: config.kubernetes.io/v1\n!!str kind: ResourceList\nkind: x\n", true},
		{"a kind in a later document", "apiVersion: config.kubernetes.io/v1\nkind: ResourceList\n---\nkind: x\n", true},
		{"no kind in the first document", "apiVersion: v1\n...\nkind: ResourceList\n", false},
		{"a key longer than kind:", "kind:x: 1\nkind: ResourceList\napiVersion: config.kubernetes.io/v1\n", true},
		{"a key longer than kind: (two colons)", "kind:: 1\nkind: ResourceList\napiVersion: config.kubernetes.io/v1\n", true},
		{"a long kind line", "apiVersion: config.kubernetes.io/v1\nkind" + strings.Repeat(" ", 253) + ": ResourceList\n", true},
		{"a control character, then U+0085", "\x00\u0085", false},
		{"a binary, then a byte order mark", "\x7fELF\x02\x01\x01\x00\ufeff", false},
		{"another kind, then a byte order mark", "\ufeffapiVersion: apps/v1\nkind: Deployment\n---\n\ufeffapiVersion: v1\nkind: Service\n", false},
		{"another kind, then U+2028", "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  annotations:\n    a: \"x\u2028y\"\n", false},
		{"a long kind value", "apiVersion: config.kubernetes.io/v1\nkind:" + strings.Repeat(" ", 240) + "ResourceList\n", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Sniff([]byte(tc.in))
			if tc.ok {
				assert.NoError(t, err, "Sniff")
			} else {
				assert.ErrorIs(t, err, ErrInvalid, "Sniff")
			}
			// A Sniffer fed in pieces says the same, wherever the pieces end.
			for cut := 0; cut <= len(tc.in); cut++ {
				var s Sniffer
				s.Write([]byte(tc.in[:cut]))
				s.Write([]byte(tc.in[cut:]))
				serr := s.Close()
				assert.Equal(t, err == nil, serr == nil, "cut at %d: Sniffer = %v, Sniff = %v", cut, serr, err)
			}
			// What Sniff refuses, Parse refuses too; what it accepts with
			// an apiVersion is a ResourceList.
			_, perr := Parse([]byte(tc.in))
			if err != nil {
				assert.Error(t, perr, "Sniff refuses what Parse accepts")
			} else if strings.Contains(tc.in, "apiVersion") {
				assert.NoError(t, perr, "Parse")
			}
			// The byte-at-a-time worst case of a leading byte order
			// mark split across pieces.
			var s Sniffer
			for i := range len(tc.in) {
				s.Write([]byte{tc.in[i]})
			}
			assert.Equal(t, err == nil, s.Close() == nil, "byte by byte")
		})
	}
}

// Binary data is refused, whatever Unicode-looking bytes it has.
func TestSniffRefusesBinary(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 20 {
		b := make([]byte, 1<<16)
		for j := range b {
			b[j] = byte(r.Uint32())
		}
		b = append(b, "\xc2\x85\xe2\x80\xa8\xef\xbb\xbf"...)
		assert.Error(t, Sniff(b), "blob %d", i)
	}
}

func BenchmarkSniff(b *testing.B) {
	data := []byte("apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems:\n" + strings.Repeat("- apiVersion: v1\n  kind: ConfigMap\n  metadata: {name: x}\n", 1<<15))
	b.SetBytes(int64(len(data)))
	for i := 0; i < b.N; i++ {
		if err := Sniff(data); err != nil {
			b.Fatal(err)
		}
	}
}

func FuzzSniff(f *testing.F) {
	f.Add([]byte("apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems: []\n"))
	f.Add([]byte("kind: ConfigMap\n"))
	f.Add([]byte("\xef\xbb\xbf--- # c\n\"kind\" : 'ResourceList'\t# c\r"))
	f.Add([]byte("%YAML 1.1\n--- {kind: ResourceList}\n"))
	f.Add([]byte("a: \"x\nkind: ConfigMap\"\nkind: ResourceList\n"))
	f.Add([]byte("  kind: ResourceList\n"))
	f.Add([]byte("kind: \"Resource\\x4cist\"\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		err := Sniff(data)
		var s Sniffer
		half := len(data) / 2
		s.Write(data[:half])
		s.Write(data[half:])
		serr := s.Close()
		assert.Equal(t, err == nil, serr == nil, "in two pieces: %v, whole: %v", serr, err)
		if err != nil {
			_, err := Parse(data)
			assert.Error(t, err, "Sniff refuses what Parse accepts: %q", data)
		}
	})
}
