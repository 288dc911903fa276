package wiresim

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"

	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"
	"go.mongodb.org/mongo-driver/v2/x/mongo/driver/wiremessage"
)

// maxMessageBytes is the largest message accepted, as hello reports it.
const maxMessageBytes = 48_000_000

// OP_MSG flag bits (the driver's wiremessage names the first two).
const (
	flagChecksumPresent = wiremessage.ChecksumPresent
	flagMoreToCome      = wiremessage.MoreToCome
)

// request is one command read from a connection: its body (section kind
// 0, or OP_QUERY's query document) and its document sequences (section
// kind 1) by identifier. The documents point into the connection's read
// buffer: they are valid until the next message is read.
type request struct {
	id     int32
	opcode wiremessage.OpCode
	body   bsoncore.Document
	seqs   map[string][]bsoncore.Document
	// noReply: the client set moreToCome (an unacknowledged write).
	noReply bool
	// db is $db, or the database of OP_QUERY's collection name.
	db string
}

// name returns the command's name: the body's first key.
func (r *request) name() string {
	elem, err := r.body.IndexErr(0)
	if err != nil {
		return ""
	}
	return elem.Key()
}

// docs returns the documents of field key: a document sequence of that
// identifier, or an array in the body.
func (r *request) docs(key string) ([]bsoncore.Document, error) {
	if seq, ok := r.seqs[key]; ok {
		return seq, nil
	}
	v, err := r.body.LookupErr(key)
	if err != nil {
		return nil, nil
	}
	arr, ok := v.ArrayOK()
	if !ok {
		return nil, fmt.Errorf("%s must be an array, got %s", key, v.Type)
	}
	vals, err := arr.Values()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", key, err)
	}
	out := make([]bsoncore.Document, 0, len(vals))
	for _, v := range vals {
		d, ok := v.DocumentOK()
		if !ok {
			return nil, fmt.Errorf("%s holds a %s, want documents", key, v.Type)
		}
		out = append(out, d)
	}
	return out, nil
}

// errNotSupported marks messages the fixture does not read.
var errNotSupported = errors.New("not supported by the wire fixture")

// readMessage reads one message into buf (grown when needed) and parses
// it into req. It returns the buffer for reuse.
func readMessage(r io.Reader, buf []byte, req *request) ([]byte, error) {
	buf, err := readRaw(r, buf)
	if err != nil {
		return buf, err
	}
	return buf, parseRequest(buf, req)
}

// readRaw reads one whole message, header included, into buf (grown when
// needed).
func readRaw(r io.Reader, buf []byte) ([]byte, error) {
	var hdr [16]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return buf, err
	}
	length := int32(binary.LittleEndian.Uint32(hdr[:]))
	if length < 16 || length > maxMessageBytes {
		return buf, fmt.Errorf("message of %d bytes: want 16 to %d", length, maxMessageBytes)
	}
	if cap(buf) < int(length) {
		buf = make([]byte, length, max(int(length), 2*cap(buf)))
	}
	buf = buf[:length]
	copy(buf, hdr[:])
	_, err := io.ReadFull(r, buf[16:])
	return buf, err
}

// parseRequest parses a whole message into req; its documents point into
// msg.
func parseRequest(msg []byte, req *request) error {
	_, reqID, _, opcode, rem, ok := wiremessage.ReadHeader(msg)
	if !ok {
		return errors.New("short message header")
	}
	*req = request{id: reqID, opcode: opcode, seqs: req.seqs}
	clear(req.seqs)
	switch opcode {
	case wiremessage.OpMsg:
		return parseMsg(rem, req)
	case opQuery:
		return parseQuery(rem, req)
	default:
		return fmt.Errorf("opcode %s: %w", opcode, errNotSupported)
	}
}

// parseMsg reads an OP_MSG after its header.
func parseMsg(src []byte, req *request) error {
	flags, src, ok := wiremessage.ReadMsgFlags(src)
	if !ok {
		return errors.New("OP_MSG without flags")
	}
	if flags&flagChecksumPresent != 0 {
		if len(src) < 4 {
			return errors.New("OP_MSG too short for its checksum")
		}
		src = src[:len(src)-4]
	}
	req.noReply = flags&flagMoreToCome != 0
	for len(src) > 0 {
		var kind wiremessage.SectionType
		kind, src, ok = wiremessage.ReadMsgSectionType(src)
		if !ok {
			return errors.New("OP_MSG section without a kind")
		}
		switch kind {
		case wiremessage.SingleDocument:
			req.body, src, ok = wiremessage.ReadMsgSectionSingleDocument(src)
			if !ok {
				return errors.New("OP_MSG body section malformed")
			}
		case wiremessage.DocumentSequence:
			var (
				id   string
				docs []bsoncore.Document
			)
			id, docs, src, ok = wiremessage.ReadMsgSectionDocumentSequence(src)
			if !ok {
				return errors.New("OP_MSG document sequence malformed")
			}
			if req.seqs == nil {
				req.seqs = map[string][]bsoncore.Document{}
			}
			req.seqs[id] = docs
		default:
			return fmt.Errorf("OP_MSG section kind %d: %w", kind, errNotSupported)
		}
	}
	if req.body == nil {
		return errors.New("OP_MSG without a body section")
	}
	if err := req.body.Validate(); err != nil {
		return fmt.Errorf("OP_MSG body: %w", err)
	}
	req.db, _ = req.body.Lookup("$db").StringValueOK()
	return nil
}

// opQuery is OP_QUERY, which the driver still sends for the first hello
// of a connection (the driver's constant for it is deprecated).
const opQuery wiremessage.OpCode = 2004

// parseQuery reads an OP_QUERY after its header (flags, the collection
// name, numberToSkip, numberToReturn, the query): only commands, on a
// collection name ending in .$cmd.
func parseQuery(src []byte, req *request) error {
	if len(src) < 4 {
		return errors.New("OP_QUERY without flags")
	}
	src = src[4:]
	end := bytes.IndexByte(src, 0)
	if end < 0 {
		return errors.New("OP_QUERY without a collection name")
	}
	coll := string(src[:end])
	src = src[end+1:]
	db, ok := strings.CutSuffix(coll, ".$cmd")
	if !ok {
		return fmt.Errorf("OP_QUERY on %s (only commands): %w", coll, errNotSupported)
	}
	if len(src) < 8 {
		return errors.New("OP_QUERY without numberToSkip and numberToReturn")
	}
	query, _, ok := bsoncore.ReadDocument(src[8:])
	if !ok {
		return errors.New("OP_QUERY without a query document")
	}
	if err := query.Validate(); err != nil {
		return fmt.Errorf("OP_QUERY query: %w", err)
	}
	// A read preference wraps the command as {$query: cmd, $readPreference: ...}.
	if inner, ok := query.Lookup("$query").DocumentOK(); ok {
		query = inner
	}
	req.body, req.db = query, db
	return nil
}

// appendReply starts the reply to req in dst: OP_MSG with one body
// section, or OP_REPLY for an OP_QUERY. The body follows; finishReply
// sets the length.
func appendReplyStart(dst []byte, req *request) []byte {
	if req.opcode == opQuery {
		_, dst = wiremessage.AppendHeaderStart(dst, wiremessage.NextRequestID(), req.id, wiremessage.OpReply)
		dst = wiremessage.AppendReplyFlags(dst, wiremessage.AwaitCapable)
		dst = wiremessage.AppendReplyCursorID(dst, 0)
		dst = wiremessage.AppendReplyStartingFrom(dst, 0)
		return wiremessage.AppendReplyNumberReturned(dst, 1)
	}
	_, dst = wiremessage.AppendHeaderStart(dst, wiremessage.NextRequestID(), req.id, wiremessage.OpMsg)
	dst = wiremessage.AppendMsgFlags(dst, 0)
	return wiremessage.AppendMsgSectionType(dst, wiremessage.SingleDocument)
}

// finishReply writes the message length into the header.
func finishReply(dst []byte) []byte {
	binary.LittleEndian.PutUint32(dst, uint32(len(dst)))
	return dst
}
