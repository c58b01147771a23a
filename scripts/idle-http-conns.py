# Opens N keep-alive connections to an SQS listener, each after one
# ListQueues answered, and prints how much the server's RSS grew per
# connection (docs/benchmarks.md, issue 39).
#   python3 scripts/idle-http-conns.py PORT N SERVER_PID
import socket, sys, time, resource
port, n, pid = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
resource.setrlimit(resource.RLIMIT_NOFILE, (n + 100, n + 100))
def rss():
    for l in open(f"/proc/{pid}/status"):
        if l.startswith("VmRSS"): return int(l.split()[1])
body = b'{"QueueNamePrefix":"x"}'
req = (b"POST / HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/x-amz-json-1.0\r\n"
       b"x-amz-target: AmazonSQS.ListQueues\r\ncontent-length: %d\r\n\r\n" % len(body)) + body
before = rss()
socks = []
for i in range(n):
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(req)
    socks.append(s)
for s in socks:
    got = b""
    while b"\r\n\r\n" not in got:
        got += s.recv(4096)
time.sleep(1)
after = rss()
print(f"{n} idle connections: server RSS {before} -> {after} KiB, {(after-before)*1024/n:.0f} B each")
