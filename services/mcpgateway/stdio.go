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
	pr, pw := io.Pipe()
	out := &lockedWriter{w: s.out}
	go s.pump(pw, out)
	return (&mcp.IOTransport{Reader: pr, Writer: out, MaxLineLength: s.maxLine + 8}).Connect(ctx)
}

// pump passes the lines of in that the SDK may have to pw and answers the
// others on out, until in ends or the session closed pw's reader.
func (s *screenedIO) pump(pw *io.PipeWriter, out io.Writer) {
	r := bufio.NewReaderSize(s.in, 64<<10)
	for {
		line, err := readLine(r, s.maxLine)
		if errors.Is(err, errLineTooLong) {
			out.Write(append(encodeError(jsonrpc.ID{}, jsonrpc.CodeInvalidRequest,
				fmt.Sprintf("the message is over this gateway's limit of %d bytes", s.maxLine)), '\n'))
			continue
		}
		if err != nil {
			pw.CloseWithError(err)
			return
		}
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		if _, answer := check(line); answer != nil {
			out.Write(append(answer, '\n'))
			continue
		}
		if accepted(line) != 0 {
			continue
		}
		if _, err := pw.Write(append(line, '\n')); err != nil {
			return // the session ended
		}
	}
}

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
