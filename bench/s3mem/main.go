// s3mem: an S3-compatible server that keeps its objects in memory, for the tiered
// storage lab (bench/tiered_catchup.py). In memory on purpose: a remote tier's reads
// never reach the broker's disk, and a server on the same machine that wrote to it
// would measure the shared disk, not the tier. It creates one bucket, prints "ready"
// and serves until killed.
//
// Usage: s3mem -listen 127.0.0.1:PORT -bucket NAME
package main

import (
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:9000", "address to serve on")
	bucket := flag.String("bucket", "headway-tier", "the bucket to create")
	flag.Parse()

	backend := s3mem.New()
	if err := backend.CreateBucket(*bucket); err != nil {
		log.Fatalf("creating bucket %s: %v", *bucket, err)
	}
	faker := gofakes3.New(backend, gofakes3.WithLogger(gofakes3.DiscardLog()))
	listener, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatalf("listening on %s: %v", *listen, err)
	}
	fmt.Println("ready", listener.Addr())
	log.Fatal(http.Serve(listener, faker.Server()))
}
