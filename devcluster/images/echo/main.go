// echo: a TCP echo server and its client, as one static binary for a real node's pods.
//
//	echo -listen :7777                      serve: every connection gets back what it sends
//	echo -connect 10.244.0.5:7777 -send hi  send "hi", print the reply, exit 0 if it is the same
package main

import (
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"time"
)

func serve(address string) error {
	listener, err := net.Listen("tcp", address)
	if err != nil {
		return err
	}
	fmt.Printf("listening on %s\n", listener.Addr())
	for {
		conn, err := listener.Accept()
		if err != nil {
			return err
		}
		go func(c net.Conn) {
			defer c.Close()
			_, _ = io.Copy(c, c)
		}(conn)
	}
}

func send(address, message string, timeout time.Duration) error {
	conn, err := net.DialTimeout("tcp", address, timeout)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(timeout))
	if _, err := conn.Write([]byte(message)); err != nil {
		return err
	}
	reply := make([]byte, len(message))
	if _, err := io.ReadFull(conn, reply); err != nil {
		return err
	}
	fmt.Printf("reply from %s: %s\n", address, reply)
	if string(reply) != message {
		return fmt.Errorf("sent %q, got %q", message, reply)
	}
	return nil
}

func main() {
	listen := flag.String("listen", "", "serve on this address")
	connect := flag.String("connect", "", "send to this address")
	message := flag.String("send", "ping", "what to send")
	timeout := flag.Duration("timeout", 5*time.Second, "how long a connection may take")
	flag.Parse()
	var err error
	switch {
	case *listen != "":
		err = serve(*listen)
	case *connect != "":
		err = send(*connect, *message, *timeout)
	default:
		err = fmt.Errorf("give -listen or -connect")
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "echo:", err)
		os.Exit(1)
	}
}
