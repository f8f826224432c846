package demobackend

import (
	"github.com/fasthttp/websocket"
	"github.com/valyala/fasthttp"
)

// upgrader accepts WebSocket handshakes from any origin (a demo).
var upgrader = websocket.FastHTTPUpgrader{
	CheckOrigin: func(*fasthttp.RequestCtx) bool { return true },
}

// echoWebSocket serves /ws: a WebSocket that sends every message back as it
// came (text or binary) until the client closes. A request that is not a
// handshake gets 400 from the upgrader.
func echoWebSocket(ctx *fasthttp.RequestCtx) {
	_ = upgrader.Upgrade(ctx, func(c *websocket.Conn) {
		defer c.Close()
		for {
			kind, msg, err := c.ReadMessage()
			if err != nil {
				return
			}
			if err := c.WriteMessage(kind, msg); err != nil {
				return
			}
		}
	})
}
