package evalwire

import (
	"errors"
	"fmt"
	"unicode/utf8"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	protoenc "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
)

// Field numbers of evaluator.proto.
const (
	fieldResourceList protowire.Number = 1 // both messages
	fieldImage        protowire.Number = 2 // EvaluateFunctionRequest
	fieldLog          protowire.Number = 2 // EvaluateFunctionResponse
	fieldTag          protowire.Number = 3 // EvaluateFunctionRequest, porch after April 2026
)

// ServerCodec is the server option that lets a server Register this
// package's service: Request and Response are decoded and encoded in
// place, every other message (health, the generated services) by gRPC's
// proto codec.
func ServerCodec() grpc.ServerOption { return grpc.ForceServerCodecV2(codec{}) }

// codec is a gRPC CodecV2 named "proto": the same wire form and content
// type as the proto codec it falls back to.
type codec struct{}

func (codec) Name() string { return protoenc.Name }

func (codec) proto() encoding.CodecV2 { return encoding.GetCodecV2(protoenc.Name) }

func (c codec) Marshal(v any) (mem.BufferSlice, error) {
	switch m := v.(type) {
	case *Request:
		return appendField(encodeMessage(m.ResourceList, []byte(m.Image)), fieldTag, Bytes([]byte(m.Tag))), nil
	case *Response:
		return encodeMessage(m.ResourceList, m.Log), nil
	}
	return c.proto().Marshal(v)
}

// encodeMessage writes either message of evaluator.proto: the resource list
// (field 1) as its own buffers, then field 2 (image or log).
func encodeMessage(rl mem.BufferSlice, second []byte) mem.BufferSlice {
	out := appendField(nil, fieldResourceList, rl)
	return appendField(out, fieldImage, Bytes(second)) // fieldImage == fieldLog
}

// appendField appends one length-delimited field: a small header buffer,
// then data's own buffers with a reference taken for the transport (which
// frees it once written). Empty fields are left out, as proto3 does.
func appendField(out mem.BufferSlice, num protowire.Number, data mem.BufferSlice) mem.BufferSlice {
	n := data.Len()
	if n == 0 {
		return out
	}
	head := protowire.AppendTag(make([]byte, 0, 12), num, protowire.BytesType)
	head = protowire.AppendVarint(head, uint64(n))
	out = append(out, mem.SliceBuffer(head))
	for _, b := range data {
		if b.Len() > 0 {
			b.Ref()
			out = append(out, b)
		}
	}
	return out
}

func (c codec) Unmarshal(data mem.BufferSlice, v any) error {
	switch m := v.(type) {
	case *Request:
		m.Free()
		req, err := decodeRequest(data)
		*m = req
		return err
	case *incoming:
		m.req.Free()
		m.req, m.err = decodeRequest(data)
		return nil
	case *Response:
		m.Free()
		rl, log, _, err := decodeMessage(data)
		if err != nil {
			return err
		}
		*m = Response{ResourceList: rl, Log: log}
		return nil
	}
	return c.proto().Unmarshal(data, v)
}

// incoming is what the server decodes a request into: the request, or why
// its body does not decode. gRPC answers a codec's error itself, always with
// Internal; keeping the error here lets the handler answer InvalidArgument,
// since a body that does not decode is the caller's fault.
type incoming struct {
	req Request
	err error
}

func decodeRequest(data mem.BufferSlice) (Request, error) {
	rl, image, tag, err := decodeMessage(data)
	if err != nil {
		return Request{}, err
	}
	for _, f := range []struct {
		name  string
		value []byte
	}{{"image", image}, {"tag", tag}} {
		if !utf8.Valid(f.value) {
			rl.Free()
			return Request{}, fmt.Errorf("evaluator.EvaluateFunctionRequest.%s: string field contains invalid UTF-8", f.name)
		}
	}
	return Request{Image: string(image), Tag: string(tag), ResourceList: rl}, nil
}

// errTruncated is a message that ends inside a field.
var errTruncated = errors.New("proto: message truncated")

// decodeMessage reads either message of evaluator.proto: the resource list
// (field 1) as views into data's buffers (references of its own, no copy),
// field 2 (image or log) and field 3 (a request's tag) copied. Other fields
// are skipped, as unknown fields are; of a field seen twice the last one
// wins.
func decodeMessage(data mem.BufferSlice) (mem.BufferSlice, []byte, []byte, error) {
	var rl mem.BufferSlice
	var second, third []byte
	fail := func(err error) (mem.BufferSlice, []byte, []byte, error) {
		rl.Free()
		return nil, nil, nil, err
	}
	c := cursor{s: data}
	for !c.done() {
		tag, err := c.varint()
		if err != nil {
			return fail(err)
		}
		num, typ := protowire.DecodeTag(tag)
		if num < protowire.MinValidNumber || num > protowire.MaxValidNumber {
			return fail(fmt.Errorf("proto: invalid field number %d", num))
		}
		if typ != protowire.BytesType || num != fieldResourceList && num != fieldImage && num != fieldTag {
			if err := c.skip(num, typ); err != nil {
				return fail(err)
			}
			continue
		}
		n, err := c.length()
		if err != nil {
			return fail(err)
		}
		field, err := c.take(n)
		if err != nil {
			return fail(err)
		}
		switch num {
		case fieldResourceList:
			rl.Free()
			rl = field
			continue
		case fieldTag:
			third = field.Materialize()
		default:
			second = field.Materialize() // fieldImage == fieldLog
		}
		field.Free()
	}
	return rl, second, third, nil
}

// cursor reads a BufferSlice across its buffers.
type cursor struct {
	s   mem.BufferSlice
	i   int // current buffer
	off int // offset in s[i]
}

func (c *cursor) done() bool {
	for c.i < len(c.s) && c.off == c.s[c.i].Len() {
		c.i, c.off = c.i+1, 0
	}
	return c.i == len(c.s)
}

func (c *cursor) byte() (byte, error) {
	if c.done() {
		return 0, errTruncated
	}
	b := c.s[c.i].ReadOnlyData()[c.off]
	c.off++
	return b, nil
}

func (c *cursor) varint() (uint64, error) {
	var v uint64
	for shift := 0; shift < 70; shift += 7 {
		b, err := c.byte()
		if err != nil {
			return 0, err
		}
		if shift == 63 && b > 1 {
			break
		}
		v |= uint64(b&0x7f) << shift
		if b < 0x80 {
			return v, nil
		}
	}
	return 0, errors.New("proto: invalid varint")
}

func (c *cursor) length() (int, error) {
	n, err := c.varint()
	if err != nil {
		return 0, err
	}
	if n > uint64(maxInt) {
		return 0, errTruncated
	}
	return int(n), nil
}

const maxInt = int(^uint(0) >> 1)

// take returns the next n bytes as views into the buffers (each holding a
// reference), without copying.
func (c *cursor) take(n int) (mem.BufferSlice, error) {
	var out mem.BufferSlice
	for n > 0 {
		if c.done() {
			out.Free()
			return nil, errTruncated
		}
		b := c.s[c.i]
		end := min(c.off+n, b.Len())
		out = append(out, b.Slice(c.off, end))
		n -= end - c.off
		c.off = end
	}
	return out, nil
}

// advance moves n bytes on.
func (c *cursor) advance(n int) error {
	for n > 0 {
		if c.done() {
			return errTruncated
		}
		step := min(n, c.s[c.i].Len()-c.off)
		c.off += step
		n -= step
	}
	return nil
}

// maxGroupDepth bounds how deeply groups may nest, where protobuf-go's
// default recursion limit does (it reads 10,001 nested groups and refuses
// 10,002; FuzzDecode's seeds hold both): each level costs a frame of the goroutine's
// stack, and a body of nothing but start-group tags would otherwise grow it
// past Go's limit, which is fatal to the process, not a panic.
const maxGroupDepth = 10000

// errTooDeep is what a body nested deeper than maxGroupDepth gets.
var errTooDeep = errors.New("proto: exceeded maximum recursion depth")

// skip passes over a field that is not length-delimited; groups are
// skipped with everything nested in them.
func (c *cursor) skip(num protowire.Number, typ protowire.Type) error {
	return c.skipNested(num, typ, 0)
}

func (c *cursor) skipNested(num protowire.Number, typ protowire.Type, depth int) error {
	switch typ {
	case protowire.VarintType:
		_, err := c.varint()
		return err
	case protowire.Fixed32Type:
		return c.advance(4)
	case protowire.Fixed64Type:
		return c.advance(8)
	case protowire.BytesType:
		n, err := c.length()
		if err != nil {
			return err
		}
		return c.advance(n)
	case protowire.StartGroupType:
		if depth > maxGroupDepth {
			return errTooDeep
		}
		for {
			tag, err := c.varint()
			if err != nil {
				return err
			}
			n, t := protowire.DecodeTag(tag)
			if t == protowire.EndGroupType {
				if n != num {
					return errors.New("proto: mismatching end group marker")
				}
				return nil
			}
			if n < protowire.MinValidNumber {
				return fmt.Errorf("proto: invalid field number %d", n)
			}
			if err := c.skipNested(n, t, depth+1); err != nil {
				return err
			}
		}
	}
	return fmt.Errorf("proto: cannot parse reserved wire type %d", typ)
}
