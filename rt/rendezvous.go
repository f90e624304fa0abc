package rt

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"time"
)

// Rendezvous is how the processes of a run started without MPI find one
// another: the variables torchrun and most cluster scripts set, one
// process per device. MASTER_ADDR:MASTER_PORT is where rank 0 listens;
// every other rank connects there, says its rank and the port it listens
// on, and gets back every rank's address; then ranks talk directly
// (TCPComm). LOCAL_RANK is the rank on its host, which chooses its GPU.
type Rendezvous struct {
	Addr      string // MASTER_ADDR
	Port      int    // MASTER_PORT
	Size      int    // WORLD_SIZE
	Rank      int    // RANK
	LocalRank int    // LOCAL_RANK (RANK when unset)
}

// RendezvousVars are the variables, in the order they are checked.
var RendezvousVars = []string{"MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK"}

// RendezvousFromEnv reads the variables: ok is false when none of
// WORLD_SIZE, RANK, MASTER_ADDR and MASTER_PORT is set; a missing or bad
// one among them is an error naming it.
func RendezvousFromEnv() (rv Rendezvous, ok bool, err error) {
	return rendezvousFrom(os.Getenv)
}

func rendezvousFrom(getenv func(string) string) (Rendezvous, bool, error) {
	var rv Rendezvous
	if getenv("WORLD_SIZE") == "" && getenv("RANK") == "" && getenv("MASTER_ADDR") == "" && getenv("MASTER_PORT") == "" {
		return rv, false, nil
	}
	num := func(name string, lo, hi int) (int, error) {
		v := getenv(name)
		n, err := strconv.Atoi(v)
		switch {
		case v == "":
			return 0, fmt.Errorf("%s is not set (the rendezvous needs MASTER_ADDR, MASTER_PORT, WORLD_SIZE and RANK)", name)
		case err != nil || n < lo || n > hi:
			return 0, fmt.Errorf("%s=%q: want a number from %d to %d", name, v, lo, hi)
		}
		return n, nil
	}
	var err error
	if rv.Size, err = num("WORLD_SIZE", 1, 1<<20); err != nil {
		return rv, true, err
	}
	if rv.Rank, err = num("RANK", 0, rv.Size-1); err != nil {
		return rv, true, err
	}
	if rv.Port, err = num("MASTER_PORT", 1, 65535); err != nil {
		return rv, true, err
	}
	if rv.Addr = getenv("MASTER_ADDR"); rv.Addr == "" {
		return rv, true, errors.New("MASTER_ADDR is not set (the rendezvous needs MASTER_ADDR, MASTER_PORT, WORLD_SIZE and RANK)")
	}
	rv.LocalRank = rv.Rank
	if getenv("LOCAL_RANK") != "" {
		if rv.LocalRank, err = num("LOCAL_RANK", 0, rv.Size-1); err != nil {
			return rv, true, err
		}
	}
	return rv, true, nil
}

// The first bytes of every connection, then its kind and the sender.
const (
	tcpMagic  = "meshrun1"
	helloJoin = 1 // a rank joining at rank 0: then world size and its port
	helloData = 2 // a rank's messages to the listener
)

// Connect performs the rendezvous, bounded by ctx, and returns this
// process's communicator.
func (rv Rendezvous) Connect(ctx context.Context) (*TCPComm, error) {
	listen := ":0"
	if rv.Rank == 0 {
		listen = ":" + strconv.Itoa(rv.Port)
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, fmt.Errorf("rendezvous: rank %d cannot listen on %s: %v", rv.Rank, listen, err)
	}
	c := &TCPComm{rank: rv.Rank, size: rv.Size, ln: ln, out: map[int]*tcpOut{}, queues: map[[2]int]*tcpQueue{}, lost: map[int]error{}}
	joins := make(chan joinReq)
	go c.accept(joins)
	port := ln.Addr().(*net.TCPAddr).Port
	if rv.Rank == 0 {
		err = c.lead(ctx, rv, port, joins)
	} else {
		err = c.join(ctx, rv, port)
	}
	if err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

type joinReq struct {
	conn       net.Conn
	rank, size int
	port       int
}

// accept takes every connection: data ones get a reader, joins go to
// the lead's rendezvous.
func (c *TCPComm) accept(joins chan<- joinReq) {
	for {
		conn, err := c.ln.Accept()
		if err != nil {
			return
		}
		go func() {
			r := bufio.NewReaderSize(conn, 1<<16)
			var h [16]byte
			if _, err := io.ReadFull(r, h[:]); err != nil || string(h[:8]) != tcpMagic {
				conn.Close()
				return
			}
			kind, from := binary.LittleEndian.Uint32(h[8:]), int(binary.LittleEndian.Uint32(h[12:]))
			switch {
			case kind == helloData && from < c.Size():
				c.read(from, r)
			case kind == helloJoin:
				var b [8]byte
				if _, err := io.ReadFull(r, b[:]); err != nil {
					conn.Close()
					return
				}
				joins <- joinReq{conn, from, int(binary.LittleEndian.Uint32(b[:])), int(binary.LittleEndian.Uint32(b[4:]))}
			default:
				conn.Close()
			}
		}()
	}
}

// lead is rank 0's side: wait for every other rank, then send each the
// table of addresses (or the reason the run cannot start).
func (c *TCPComm) lead(ctx context.Context, rv Rendezvous, port int, joins <-chan joinReq) error {
	addrs := make([]string, rv.Size)
	addrs[0] = net.JoinHostPort(rv.Addr, strconv.Itoa(port))
	var conns []net.Conn
	defer func() {
		for _, cn := range conns {
			cn.Close()
		}
	}()
	var fail error
	for n := 1; n < rv.Size; n++ {
		select {
		case j := <-joins:
			conns = append(conns, j.conn)
			switch {
			case j.size != rv.Size && fail == nil:
				fail = fmt.Errorf("rank %d says WORLD_SIZE=%d, rank 0 says %d", j.rank, j.size, rv.Size)
			case (j.rank <= 0 || j.rank >= rv.Size) && fail == nil:
				fail = fmt.Errorf("a process joined with RANK=%d, outside 1..%d", j.rank, rv.Size-1)
			case fail == nil && addrs[j.rank] != "":
				fail = fmt.Errorf("two processes joined with RANK=%d", j.rank)
			case fail == nil:
				host, _, _ := net.SplitHostPort(j.conn.RemoteAddr().String())
				addrs[j.rank] = net.JoinHostPort(host, strconv.Itoa(j.port))
			}
		case <-ctx.Done():
			var missing []int
			for r := 1; r < rv.Size; r++ {
				if addrs[r] == "" {
					missing = append(missing, r)
				}
			}
			return fmt.Errorf("rendezvous at :%d: ranks %v did not join: %w", rv.Port, missing, ErrPeerTimeout)
		}
	}
	if fail == nil {
		c.addrs = addrs
	}
	reply := tableMessage(addrs, fail)
	for _, cn := range conns {
		cn.SetWriteDeadline(time.Now().Add(10 * time.Second))
		cn.Write(reply)
	}
	if fail != nil {
		return fmt.Errorf("rendezvous: %v", fail)
	}
	return nil
}

// tableMessage is the lead's answer: a status (0, or 1 and a reason),
// then every address, each as a length and its bytes.
func tableMessage(addrs []string, fail error) []byte {
	var b []byte
	if fail != nil {
		b = binary.LittleEndian.AppendUint32(b, 1)
		return appendString(b, fail.Error())
	}
	b = binary.LittleEndian.AppendUint32(b, 0)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(addrs)))
	for _, a := range addrs {
		b = appendString(b, a)
	}
	return b
}

func appendString(b []byte, s string) []byte {
	b = binary.LittleEndian.AppendUint32(b, uint32(len(s)))
	return append(b, s...)
}

func readString(r io.Reader) (string, error) {
	var n [4]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return "", err
	}
	s := make([]byte, binary.LittleEndian.Uint32(n[:]))
	_, err := io.ReadFull(r, s)
	return string(s), err
}

// join is every other rank's side: connect to rank 0 (trying again while
// it is not listening yet), say who this is, read the table.
func (c *TCPComm) join(ctx context.Context, rv Rendezvous, port int) error {
	master := net.JoinHostPort(rv.Addr, strconv.Itoa(rv.Port))
	var conn net.Conn
	for {
		var d net.Dialer
		var err error
		if conn, err = d.DialContext(ctx, "tcp", master); err == nil {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("rendezvous: rank %d cannot reach rank 0 at %s (MASTER_ADDR, MASTER_PORT): %v: %w", rv.Rank, master, err, ErrPeerTimeout)
		case <-time.After(50 * time.Millisecond):
		}
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	}
	hello := binary.LittleEndian.AppendUint32([]byte(tcpMagic), helloJoin)
	hello = binary.LittleEndian.AppendUint32(hello, uint32(rv.Rank))
	hello = binary.LittleEndian.AppendUint32(hello, uint32(rv.Size))
	hello = binary.LittleEndian.AppendUint32(hello, uint32(port))
	if _, err := conn.Write(hello); err != nil {
		return fmt.Errorf("rendezvous: rank %d: %v", rv.Rank, err)
	}
	r := bufio.NewReader(conn)
	var st [4]byte
	if _, err := io.ReadFull(r, st[:]); err != nil {
		return fmt.Errorf("rendezvous: rank %d got no answer from rank 0 at %s: %v", rv.Rank, master, err)
	}
	if binary.LittleEndian.Uint32(st[:]) != 0 {
		why, _ := readString(r)
		return fmt.Errorf("rendezvous: rank 0 refused the run: %s", why)
	}
	if _, err := io.ReadFull(r, st[:]); err != nil {
		return fmt.Errorf("rendezvous: rank %d: %v", rv.Rank, err)
	}
	addrs := make([]string, binary.LittleEndian.Uint32(st[:]))
	for i := range addrs {
		a, err := readString(r)
		if err != nil {
			return fmt.Errorf("rendezvous: rank %d: %v", rv.Rank, err)
		}
		addrs[i] = a
	}
	if len(addrs) != rv.Size {
		return fmt.Errorf("rendezvous: rank 0 sent %d addresses for WORLD_SIZE=%d", len(addrs), rv.Size)
	}
	c.addrs = addrs
	return nil
}
