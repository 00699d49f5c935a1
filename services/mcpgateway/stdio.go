package mcpgateway

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// screenedIO is newline-delimited JSON-RPC over in and out, as
// mcp.StdioTransport, except that a line that is not JSON, not JSON-RPC,
// over maxLine bytes, or a request for a method the gateway does not serve
// is answered with a JSON-RPC error instead of ending the session (the
// SDK's reader stops at the first line it cannot decode).
type screenedIO struct {
	in      io.Reader
	out     io.Writer
	maxLine int
}

func (s *screenedIO) Connect(ctx context.Context) (mcp.Connection, error) {
	out := &lockedWriter{w: s.out}
	in := &screenReader{r: bufio.NewReaderSize(s.in, 64<<10), out: out, maxLine: s.maxLine}
	return (&mcp.IOTransport{Reader: in, Writer: out, MaxLineLength: s.maxLine + 8}).Connect(ctx)
}

// screenReader gives the SDK's reader the lines of r it may have, and
// answers the others on out itself. It reads in the SDK's reader's own
// goroutine: a line reaches the SDK with no hand-over between goroutines.
type screenReader struct {
	r       *bufio.Reader
	out     io.Writer
	maxLine int
	pending []byte // the rest of the line being read, '\n' included
}

func (s *screenReader) Read(p []byte) (int, error) {
	for len(s.pending) == 0 {
		line, err := readLine(s.r, s.maxLine)
		if errors.Is(err, errLineTooLong) {
			s.out.Write(append(encodeError(jsonrpc.ID{}, jsonrpc.CodeInvalidRequest,
				fmt.Sprintf("the message is over this gateway's limit of %d bytes", s.maxLine)), '\n'))
			continue
		}
		if err != nil {
			return 0, err
		}
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		if _, answer, drop := check(line); answer != nil {
			s.out.Write(append(answer, '\n'))
			continue
		} else if drop {
			continue
		}
		s.pending = append(line, '\n')
	}
	n := copy(p, s.pending)
	s.pending = s.pending[n:]
	return n, nil
}

// Close does nothing: stdin stays open until the client closes it.
func (s *screenReader) Close() error { return nil }

var errLineTooLong = errors.New("line too long")

// readLine reads one line of at most max bytes; a longer one is read to
// its end and dropped, with errLineTooLong.
func readLine(r *bufio.Reader, max int) ([]byte, error) {
	var line []byte
	long := false
	for {
		chunk, err := r.ReadSlice('\n')
		if !long {
			line = append(line, chunk...)
			if len(line) > max+2 { // room for "\r\n"
				long, line = true, nil
			}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if long && (err == nil || errors.Is(err, io.EOF)) {
			return nil, errLineTooLong
		}
		if err != nil && (len(line) == 0 || !errors.Is(err, io.EOF)) {
			return nil, err
		}
		return line, nil
	}
}

// lockedWriter writes whole messages: the SDK's and the screen's answers
// do not interleave.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func (l *lockedWriter) Close() error { return nil }
