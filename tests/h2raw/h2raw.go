// Package h2raw is an HTTP/2 client for attacks below gRPC: it writes the
// frames it is told to (golang.org/x/net/http2's Framer), never a
// WINDOW_UPDATE unless asked, and records what the server answers on each
// stream: the gRPC status of its trailers, or its RST_STREAM code.
package h2raw

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// Conn is one raw client connection.
type Conn struct {
	t    testing.TB
	conn net.Conn

	wmu    sync.Mutex // serializes writes: the framer and the encoder
	fr     *http2.Framer
	enc    *hpack.Encoder
	hbuf   bytes.Buffer
	nextID uint32

	mu       sync.Mutex
	windows  *sync.Cond       // on mu: signalled when a send window grows
	connWin  int64            // what the server's connection window lets us send
	initWin  int64            // a new stream's send window (the server's SETTINGS)
	sendWin  map[uint32]int64 // per stream, once used
	ended    map[uint32]End
	data     map[uint32]int // DATA bytes received per stream
	closed   chan struct{}
	readErr  error
	writeErr error
}

// End is how the server ended a stream.
type End struct {
	// GRPCStatus is the grpc-status of the trailers ("" without them).
	GRPCStatus string
	// Message is the grpc-message of the trailers.
	Message string
	// Reset is the RST_STREAM code, when the server reset the stream.
	Reset http2.ErrCode
	// WasReset says the stream ended by RST_STREAM.
	WasReset bool
}

// Dial opens a connection to addr from the local address local ("" for
// any), sends the preface and SETTINGS with settings, and starts reading.
// The connection is closed when the test ends.
func Dial(t testing.TB, addr, local string, settings ...http2.Setting) *Conn {
	t.Helper()
	d := net.Dialer{Timeout: 5 * time.Second}
	if local != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(local)}
	}
	nc, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	c := &Conn{t: t, conn: nc, nextID: 1, ended: map[uint32]End{}, data: map[uint32]int{}, closed: make(chan struct{}),
		connWin: 65535, initWin: 65535, sendWin: map[uint32]int64{}}
	c.windows = sync.NewCond(&c.mu)
	c.fr = http2.NewFramer(nc, nc)
	c.fr.MaxHeaderListSize = 1 << 20
	c.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	c.enc = hpack.NewEncoder(&c.hbuf)
	c.enc.SetMaxDynamicTableSizeLimit(64 << 10)
	t.Cleanup(func() { _ = nc.Close() })
	if _, err := nc.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatalf("preface: %v", err)
	}
	c.write(func() error { return c.fr.WriteSettings(settings...) })
	go c.read()
	return c
}

// write runs f with the writer's lock. A write error is kept, not the
// test's: a server closing the connection is what many attacks expect.
func (c *Conn) write(f func() error) {
	c.wmu.Lock()
	err := f()
	c.wmu.Unlock()
	if err != nil {
		c.mu.Lock()
		if c.writeErr == nil {
			c.writeErr = err
		}
		c.mu.Unlock()
	}
}

func (c *Conn) read() {
	defer func() {
		close(c.closed)
		c.mu.Lock()
		c.windows.Broadcast()
		c.mu.Unlock()
	}()
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			c.mu.Lock()
			c.readErr = err
			c.mu.Unlock()
			return
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if v, ok := f.Value(http2.SettingInitialWindowSize); ok && !f.IsAck() {
				c.mu.Lock()
				for id := range c.sendWin {
					c.sendWin[id] += int64(v) - c.initWin
				}
				c.initWin = int64(v)
				c.windows.Broadcast()
				c.mu.Unlock()
			}
			if !f.IsAck() {
				c.write(func() error { return c.fr.WriteSettingsAck() })
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				c.write(func() error { return c.fr.WritePing(true, f.Data) })
			}
		case *http2.MetaHeadersFrame:
			if f.StreamEnded() {
				c.mu.Lock()
				c.ended[f.StreamID] = End{GRPCStatus: value(f, "grpc-status"), Message: value(f, "grpc-message")}
				c.windows.Broadcast()
				c.mu.Unlock()
			}
		case *http2.WindowUpdateFrame:
			c.mu.Lock()
			if f.StreamID == 0 {
				c.connWin += int64(f.Increment)
			} else {
				c.sendWin[f.StreamID] = c.streamWindowLocked(f.StreamID) + int64(f.Increment)
			}
			c.windows.Broadcast()
			c.mu.Unlock()
		case *http2.RSTStreamFrame:
			c.mu.Lock()
			if _, done := c.ended[f.StreamID]; !done {
				c.ended[f.StreamID] = End{Reset: f.ErrCode, WasReset: true}
			}
			c.windows.Broadcast()
			c.mu.Unlock()
		case *http2.DataFrame:
			c.mu.Lock()
			c.data[f.StreamID] += len(f.Data())
			c.mu.Unlock()
		}
	}
}

func value(f *http2.MetaHeadersFrame, name string) string {
	for _, hf := range f.RegularFields() {
		if hf.Name == name {
			return hf.Value
		}
	}
	return ""
}

// Closed reports whether the server closed the connection.
func (c *Conn) Closed() bool {
	select {
	case <-c.closed:
		return true
	default:
		return false
	}
}

// Done is closed when the connection's reads end (the server closed it).
func (c *Conn) Done() <-chan struct{} { return c.closed }

// Ended is how stream id ended, if it has.
func (c *Conn) Ended(id uint32) (End, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.ended[id]
	return e, ok
}

// EndedCount is the number of streams the server has ended.
func (c *Conn) EndedCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.ended)
}

// DataReceived is the DATA bytes received on stream id.
func (c *Conn) DataReceived(id uint32) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.data[id]
}

// Open starts a gRPC stream for method ("/pkg.Service/Method") with extra
// header fields, and returns its id. Its body is the caller's to send.
func (c *Conn) Open(method string, extra ...hpack.HeaderField) uint32 {
	var id uint32
	c.write(func() error {
		id = c.nextID
		c.nextID += 2
		c.hbuf.Reset()
		for _, hf := range append([]hpack.HeaderField{
			{Name: ":method", Value: "POST"},
			{Name: ":scheme", Value: "http"},
			{Name: ":path", Value: method},
			{Name: ":authority", Value: "fnrunner"},
			{Name: "content-type", Value: "application/grpc"},
			{Name: "te", Value: "trailers"},
		}, extra...) {
			if err := c.enc.WriteField(hf); err != nil {
				return err
			}
		}
		return c.writeHeaderBlock(id, c.hbuf.Bytes())
	})
	return id
}

// writeHeaderBlock writes a header block as HEADERS and CONTINUATION frames
// of at most 16 KiB. c.wmu is held.
func (c *Conn) writeHeaderBlock(id uint32, block []byte) error {
	const frame = 16 << 10
	first := block[:min(len(block), frame)]
	rest := block[len(first):]
	if err := c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: first, EndHeaders: len(rest) == 0}); err != nil {
		return err
	}
	for len(rest) > 0 {
		n := min(len(rest), frame)
		if err := c.fr.WriteContinuation(id, n == len(rest), rest[:n]); err != nil {
			return err
		}
		rest = rest[n:]
	}
	return nil
}

// Frame is msg, a serialized protobuf message, as a gRPC message frame
// (uncompressed).
func Frame(msg []byte) []byte {
	head := make([]byte, 5, 5+len(msg))
	binary.BigEndian.PutUint32(head[1:], uint32(len(msg)))
	return append(head, msg...)
}

// Message is a gRPC message frame (uncompressed) of a protobuf bytes field 1
// holding payload, the form of wrapperspb.BytesValue and of an
// EvaluateFunctionRequest's resource list alike.
func Message(payload []byte) []byte {
	field := binary.AppendUvarint([]byte{0x0a}, uint64(len(payload)))
	return Frame(append(field, payload...))
}

// Data sends b on stream id in DATA frames of at most 16 KiB, as the
// server's flow-control windows let it, ending the stream after the last
// when end is set. It returns early when the connection closes or the
// stream ends.
func (c *Conn) Data(id uint32, b []byte, end bool) {
	for {
		n := c.take(id, len(b))
		if n < 0 {
			return
		}
		last := n == len(b)
		chunk := b[:n]
		c.write(func() error { return c.fr.WriteData(id, end && last, chunk) })
		b = b[n:]
		if last {
			return
		}
	}
}

// DataUnchecked sends b on stream id heeding no flow control, as an
// attacker may.
func (c *Conn) DataUnchecked(id uint32, b []byte, end bool) {
	c.write(func() error {
		for len(b) > 16<<10 {
			if err := c.fr.WriteData(id, false, b[:16<<10]); err != nil {
				return err
			}
			b = b[16<<10:]
		}
		return c.fr.WriteData(id, end, b)
	})
}

// take waits until stream id may send, and takes up to want bytes (at most
// 16 KiB) of its and the connection's windows; -1 once the connection is
// closed or the stream ended. An empty want takes nothing.
func (c *Conn) take(id uint32, want int) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	for {
		if c.Closed() {
			return -1
		}
		if _, ended := c.ended[id]; ended {
			return -1
		}
		if want == 0 {
			return 0
		}
		n := min(int64(want), 16<<10, c.connWin, c.streamWindowLocked(id))
		if n > 0 {
			c.connWin -= n
			c.sendWin[id] = c.streamWindowLocked(id) - n
			return int(n)
		}
		c.windows.Wait()
	}
}

func (c *Conn) streamWindowLocked(id uint32) int64 {
	if w, ok := c.sendWin[id]; ok {
		return w
	}
	return c.initWin
}

// Settings sends a SETTINGS frame with settings (none: an empty one, which
// the server must acknowledge).
func (c *Conn) Settings(settings ...http2.Setting) {
	c.write(func() error { return c.fr.WriteSettings(settings...) })
}

// Reset resets stream id (RST_STREAM CANCEL).
func (c *Conn) Reset(id uint32) {
	c.write(func() error { return c.fr.WriteRSTStream(id, http2.ErrCodeCancel) })
}

// WindowUpdate opens stream id's window (0: the connection's) by n.
func (c *Conn) WindowUpdate(id, n uint32) {
	c.write(func() error { return c.fr.WriteWindowUpdate(id, n) })
}

// Wait waits up to timeout for stream id to end.
func (c *Conn) Wait(id uint32, timeout time.Duration) (End, bool) {
	deadline := time.Now().Add(timeout)
	for {
		if e, ok := c.Ended(id); ok {
			return e, true
		}
		if time.Now().After(deadline) || c.Closed() {
			e, ok := c.Ended(id)
			return e, ok
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Err is why the connection's reads ended (io.EOF or a reset when the
// server closed it).
func (c *Conn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if errors.Is(c.readErr, io.EOF) {
		return nil
	}
	return c.readErr
}

// Status is e's gRPC code as a number, -1 without trailers.
func (e End) Status() int {
	n, err := strconv.Atoi(e.GRPCStatus)
	if err != nil {
		return -1
	}
	return n
}
