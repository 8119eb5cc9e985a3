// echo: a TCP echo server and its client, as one static binary for a real node's pods.
//
//	echo -listen :7777                      serve: every connection gets back what it sends
//	echo -connect 10.244.0.5:7777 -send hi  send "hi", print the reply, exit 0 if it is the same
//	echo -dial 10.244.0.5:8443              open a TCP connection and close it, exit 0 if it opened
//	echo -get https://10.96.0.1/version     GET over HTTPS (the server's certificate unchecked), print the body
//	echo -webhook :8443 -cert c -key k -deny "why"  an admission webhook that refuses every request with "why"
//
// -attempts N retries a failed -connect, -dial or -get, half a second apart (a Service's route may come a
// moment after its pod is ready).
package main

import (
	"crypto/tls"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
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

// dial only opens the connection: whether a port can be reached, whatever protocol it speaks.
func dial(address string, timeout time.Duration) error {
	conn, err := net.DialTimeout("tcp", address, timeout)
	if err != nil {
		return err
	}
	fmt.Printf("connected to %s\n", address)
	return conn.Close()
}

func get(url string, timeout time.Duration) error {
	client := &http.Client{
		Timeout: timeout,
		// A probe of the route, not of trust: the certificate is not checked.
		Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}, //nolint:gosec
	}
	response, err := client.Get(url)
	if err != nil {
		return err
	}
	defer response.Body.Close()
	body, err := io.ReadAll(io.LimitReader(response.Body, 4096))
	if err != nil {
		return err
	}
	fmt.Printf("%s %s\n%s\n", url, response.Status, body)
	return nil
}

// refusal answers an AdmissionReview (admission.k8s.io/v1): its uid echoed, not allowed, `message`.
func refusal(body []byte, message string) ([]byte, error) {
	var review struct {
		Request struct {
			UID string `json:"uid"`
		} `json:"request"`
	}
	if err := json.Unmarshal(body, &review); err != nil {
		return nil, err
	}
	return json.Marshal(map[string]any{
		"apiVersion": "admission.k8s.io/v1",
		"kind":       "AdmissionReview",
		"response": map[string]any{
			"uid":     review.Request.UID,
			"allowed": false,
			"status":  map[string]any{"code": 403, "message": message},
		},
	})
}

func webhook(address, cert, key, message string) error {
	http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		answer, err2 := refusal(body, message)
		if err != nil || err2 != nil {
			http.Error(w, "not an AdmissionReview", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(answer)
	})
	fmt.Printf("webhook on %s\n", address)
	return http.ListenAndServeTLS(address, cert, key, nil)
}

func retry(attempts int, action func() error) error {
	err := action()
	for attempt := 1; err != nil && attempt < attempts; attempt++ {
		fmt.Fprintf(os.Stderr, "attempt %d: %v\n", attempt, err)
		time.Sleep(500 * time.Millisecond)
		err = action()
	}
	return err
}

func main() {
	listen := flag.String("listen", "", "serve on this address")
	connect := flag.String("connect", "", "send to this address")
	dialAddress := flag.String("dial", "", "open a TCP connection to this address")
	getURL := flag.String("get", "", "GET this https URL")
	webhookAddress := flag.String("webhook", "", "serve admission reviews on this address")
	cert := flag.String("cert", "", "the webhook's certificate (PEM)")
	key := flag.String("key", "", "the webhook's private key (PEM)")
	deny := flag.String("deny", "refused by the echo webhook", "the webhook's refusal")
	message := flag.String("send", "ping", "what to send")
	timeout := flag.Duration("timeout", 5*time.Second, "how long a connection may take")
	attempts := flag.Int("attempts", 1, "how many times -connect or -get is tried")
	flag.Parse()
	var err error
	switch {
	case *listen != "":
		err = serve(*listen)
	case *connect != "":
		err = retry(*attempts, func() error { return send(*connect, *message, *timeout) })
	case *dialAddress != "":
		err = retry(*attempts, func() error { return dial(*dialAddress, *timeout) })
	case *getURL != "":
		err = retry(*attempts, func() error { return get(*getURL, *timeout) })
	case *webhookAddress != "":
		err = webhook(*webhookAddress, *cert, *key, *deny)
	default:
		err = fmt.Errorf("give -listen, -connect, -dial, -get or -webhook")
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "echo:", err)
		os.Exit(1)
	}
}
