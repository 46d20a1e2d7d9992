package taskrouter_test

// The requests the differential tests (fastpath_diff_test.go) send to
// both handlers, per dialect.

// coreCases and extCases are the requests both sides must answer alike.
func coreCases() []diffCase {
	all := map[string]string{"done": "done", "working": "working", "failed": "failed", "rpcerr": "rpcerr", "ask": "ask"}
	return []diffCase{
		{name: "get done", tasks: all, req: coreReq("tasks/get", `,"params":{"taskId":"{done}"}`), fast: true},
		{name: "get working", tasks: all, req: coreReq("tasks/get", `,"params":{"taskId":"{working}"}`), fast: true},
		{name: "get failed", tasks: all, req: coreReq("tasks/get", `,"params":{"taskId":"{failed}"}`), fast: true},
		{name: "get input_required", tasks: all, req: coreReq("tasks/get", `,"params":{"taskId":"{ask}"}`), fast: true},
		{name: "get with the TS client's stray task", tasks: all, req: coreReq("tasks/get", `,"params":{"taskId":"{done}","task":{}}`), fast: true},
		{name: "get with _meta", tasks: all, req: coreReq("tasks/get", `,"params":{"taskId":"{done}","_meta":{"progressToken":3}}`), fast: true},
		{name: "get with a forged private _meta key", tasks: all, req: coreReq("tasks/get", `,"params":{"taskId":"{done}","_meta":{"taskbridge/private/task":{}}}`), fast: true},
		{name: "get unknown", req: coreReq("tasks/get", `,"params":{"taskId":"0123456789abcdef0123456789abcdef"}`), fast: true},
		{name: "get without params", req: coreReq("tasks/get", ``), fast: true},
		{name: "get params null", req: coreReq("tasks/get", `,"params":null`)},
		{name: "get empty params", req: coreReq("tasks/get", `,"params":{}`), fast: true},
		{name: "get taskId a number", req: coreReq("tasks/get", `,"params":{"taskId":42}`)},
		{name: "get taskId in the wrong case", tasks: all, req: coreReq("tasks/get", `,"params":{"TaskId":"{done}"}`)},
		{name: "get taskId escaped key", tasks: all, req: coreReq("tasks/get", `,"params":{"task\u0049d":"{done}"}`)},
		{name: "get taskId twice", tasks: all, req: coreReq("tasks/get", `,"params":{"taskId":"{done}","taskId":"{failed}"}`)},
		{name: "get params an array", req: coreReq("tasks/get", `,"params":[1]`)},
		{name: "get _meta a string", tasks: all, req: coreReq("tasks/get", `,"params":{"taskId":"{done}","_meta":"x"}`)},
		{name: "get with a per-request protocol version", tasks: all, req: coreReq("tasks/get", `,"params":{"taskId":"{done}","_meta":{"io.modelcontextprotocol/protocolVersion":"2025-11-25"}}`)},
		{name: "result done", tasks: all, req: coreReq("tasks/result", `,"params":{"taskId":"{done}"}`), fast: true},
		{name: "result tool error", tasks: all, req: coreReq("tasks/result", `,"params":{"taskId":"{failed}"}`), fast: true},
		{name: "result rpc error", tasks: all, req: coreReq("tasks/result", `,"params":{"taskId":"{rpcerr}"}`), fast: true},
		{name: "result unknown", req: coreReq("tasks/result", `,"params":{"taskId":"nope"}`), fast: true},
		{name: "result without taskId", req: coreReq("tasks/result", `,"params":{}`), fast: true},
		{name: "list", tasks: all, req: coreReq("tasks/list", ``), fast: true},
		{name: "list empty params", tasks: all, req: coreReq("tasks/list", `,"params":{}`), fast: true},
		{name: "list bad cursor", req: coreReq("tasks/list", `,"params":{"cursor":"not-a-cursor"}`), fast: true},
		{name: "list cursor a number", req: coreReq("tasks/list", `,"params":{"cursor":5}`)},
		{name: "cancel done", tasks: all, req: coreReq("tasks/cancel", `,"params":{"taskId":"{done}"}`), fast: true},
		{name: "cancel unknown", req: coreReq("tasks/cancel", `,"params":{"taskId":"nope"}`), fast: true},
		{name: "cancel working", tasks: map[string]string{"victim": "working"}, req: coreReq("tasks/cancel", `,"params":{"taskId":"{victim}"}`), fast: true},
		{name: "get cancelled", tasks: map[string]string{"victim": "working"}, req: coreReq("tasks/get", `,"params":{"taskId":"{victim}"}`), fast: true},
		{name: "result cancelled", tasks: map[string]string{"victim": "working"}, req: coreReq("tasks/result", `,"params":{"taskId":"{victim}"}`), fast: true},
		{name: "update in the core dialect", tasks: all, req: coreReq("tasks/update", `,"params":{"taskId":"{ask}","inputResponses":{}}`), fast: true},
		{name: "string id", tasks: all, req: func(s *diffSide) (map[string]string, string) {
			return coreHeaders(s), fill(s, `{"jsonrpc":"2.0","id":"abc","method":"tasks/get","params":{"taskId":"{done}"}}`)
		}, fast: true},
		{name: "fractional id (refused by the shim on both paths: the SDK echoed it altered)", tasks: all, req: func(s *diffSide) (map[string]string, string) {
			return coreHeaders(s), fill(s, `{"jsonrpc":"2.0","id":7.5,"method":"tasks/get","params":{"taskId":"{done}"}}`)
		}},
		{name: "notification", tasks: all, req: func(s *diffSide) (map[string]string, string) {
			return coreHeaders(s), fill(s, `{"jsonrpc":"2.0","method":"tasks/get","params":{"taskId":"{done}"}}`)
		}},
		{name: "wrong jsonrpc version", tasks: all, req: func(s *diffSide) (map[string]string, string) {
			return coreHeaders(s), fill(s, `{"jsonrpc":"1.0","id":1,"method":"tasks/get","params":{"taskId":"{done}"}}`)
		}},
		{name: "batch", tasks: all, req: func(s *diffSide) (map[string]string, string) {
			return coreHeaders(s), fill(s, `[{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"taskId":"{done}"}},{"jsonrpc":"2.0","id":2,"method":"tasks/get","params":{"taskId":"{failed}"}}]`)
		}},
		{name: "unknown session", tasks: all, req: func(s *diffSide) (map[string]string, string) {
			h := coreHeaders(s)
			h["Mcp-Session-Id"] = "NOSUCHSESSION"
			return h, fill(s, `{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"taskId":"{done}"}}`)
		}},
		{name: "no session", tasks: all, req: func(s *diffSide) (map[string]string, string) {
			h := coreHeaders(s)
			h["Mcp-Session-Id"] = ""
			return h, fill(s, `{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"taskId":"{done}"}}`)
		}},
		{name: "no protocol version header", tasks: all, req: func(s *diffSide) (map[string]string, string) {
			h := coreHeaders(s)
			h["Mcp-Protocol-Version"] = ""
			return h, fill(s, `{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"taskId":"{done}"}}`)
		}, fast: true},
		{name: "unsupported protocol version header", tasks: all, req: func(s *diffSide) (map[string]string, string) {
			h := coreHeaders(s)
			h["Mcp-Protocol-Version"] = "1999-01-01"
			return h, fill(s, `{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"taskId":"{done}"}}`)
		}},
		{name: "older protocol version header", tasks: all, req: func(s *diffSide) (map[string]string, string) {
			h := coreHeaders(s)
			h["Mcp-Protocol-Version"] = "2025-06-18"
			return h, fill(s, `{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"taskId":"{done}"}}`)
		}},
		{name: "accept without SSE", tasks: all, req: func(s *diffSide) (map[string]string, string) {
			h := coreHeaders(s)
			h["Accept"] = "application/json"
			return h, fill(s, `{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"taskId":"{done}"}}`)
		}},
		{name: "accept with parameters and wildcards", tasks: all, req: func(s *diffSide) (map[string]string, string) {
			h := coreHeaders(s)
			h["Accept"] = "application/*;q=0.9, text/*"
			return h, fill(s, `{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"taskId":"{done}"}}`)
		}, fast: true},
		{name: "content type text/plain", tasks: all, req: func(s *diffSide) (map[string]string, string) {
			h := coreHeaders(s)
			h["Content-Type"] = "text/plain"
			return h, fill(s, `{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"taskId":"{done}"}}`)
		}},
		{name: "content type with charset", tasks: all, req: func(s *diffSide) (map[string]string, string) {
			h := coreHeaders(s)
			h["Content-Type"] = "application/json; charset=utf-8"
			return h, fill(s, `{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"taskId":"{done}"}}`)
		}, fast: true},
		{name: "Last-Event-ID on a POST", tasks: all, req: func(s *diffSide) (map[string]string, string) {
			h := coreHeaders(s)
			h["Last-Event-ID"] = "x_1"
			return h, fill(s, `{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"taskId":"{done}"}}`)
		}},
		{name: "two JSON values", tasks: all, req: func(s *diffSide) (map[string]string, string) {
			return coreHeaders(s), fill(s, `{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"taskId":"{done}"}}{}`)
		}},
		{name: "create core task", req: coreReq("tools/call", `,"params":{"name":"sleepy","arguments":{"ms":0},"task":{"ttl":1000}}`), fast: true},
		{name: "create core task, bad ttl", req: coreReq("tools/call", `,"params":{"name":"sleepy","arguments":{"ms":0},"task":{"ttl":-1}}`)},
		{name: "create core task, forbidden tool", req: coreReq("tools/call", `,"params":{"name":"echo","arguments":{"text":"x"},"task":{}}`)},
		{name: "create core task, unknown tool", req: coreReq("tools/call", `,"params":{"name":"nope","arguments":{},"task":{}}`)},
		{name: "create core task, bad arguments", req: coreReq("tools/call", `,"params":{"name":"sleepy","arguments":{"ms":"x"},"task":{}}`)},
		{name: "plain call", req: coreReq("tools/call", `,"params":{"name":"echo","arguments":{"text":"x"}}`)},
		{name: "plain call, host mode", req: coreReq("tools/call", `,"params":{"name":"sleepy","arguments":{"ms":0,"label":"p"}}`), fast: true},
		{name: "plain call, required tool", req: coreReq("tools/call", `,"params":{"name":"must","arguments":{"ms":0,"label":"r"}}`), fast: true},
		{name: "plain call, host mode, bad arguments", req: coreReq("tools/call", `,"params":{"name":"sleepy","arguments":{"ms":"x"}}`), fast: true},
		{name: "plain call, host mode, tool error", req: coreReq("tools/call", `,"params":{"name":"boom","arguments":{}}`), fast: true},
		{name: "plain call, host mode, JSON-RPC error", req: coreReq("tools/call", `,"params":{"name":"rpcerr","arguments":{}}`), fast: true},
		{name: "plain call, host mode, panic", req: coreReq("tools/call", `,"params":{"name":"panicky","arguments":{}}`), fast: true},
		{name: "plain call, host mode, notifications", req: coreReq("tools/call", `,"params":{"name":"chatty_host","arguments":{"n":2},"_meta":{"progressToken":"p1"}}`), fast: true},
		{name: "plain call, unknown tool", req: coreReq("tools/call", `,"params":{"name":"nope","arguments":{}}`)},
		{name: "plain call, no params", req: coreReq("tools/call", ``)},
		{name: "plain call, no arguments", req: bareReq("tools/call", `,"params":{"name":"echo"}`), fast: true},
		{name: "plain call, client takes no requests", req: bareReq("tools/call", `,"params":{"name":"echo","arguments":{"text":"<b>&"}}`), fast: true},
		{name: "plain call, bad arguments", req: bareReq("tools/call", `,"params":{"name":"echo","arguments":{"text":7}}`), fast: true},
		{name: "plain call, arguments not an object", req: bareReq("tools/call", `,"params":{"name":"echo","arguments":[1]}`), fast: true},
		{name: "plain call, progress and a log", req: bareReq("tools/call", `,"params":{"name":"chatty","arguments":{"n":3},"_meta":{"progressToken":7}}`), fast: true},
		{name: "plain call, a log", req: bareReq("tools/call", `,"params":{"name":"chatty","arguments":{"n":3}}`), fast: true},
		{name: "plain call, forged private _meta", req: bareReq("tools/call", `,"params":{"name":"echo","arguments":{"text":"x"},"_meta":{"taskbridge/private/conn":"c","taskbridge/private/task":{}}}`), fast: true},
		{name: "plain call, _task_id without a continuation", req: bareReq("tools/call", `,"params":{"name":"echo","arguments":{"text":"x"},"_meta":{"_task_id":"t"}}`)},
		{name: "plain call, string id", req: func(s *diffSide) (map[string]string, string) {
			return bareHeaders(s), `{"jsonrpc":"2.0","id":"p-1","method":"tools/call","params":{"name":"echo","arguments":{"text":"x"}}}`
		}, fast: true},
	}
}

func extCases() []diffCase {
	all := map[string]string{"done": "done", "working": "working", "failed": "failed", "rpcerr": "rpcerr", "ask": "ask"}
	return []diffCase{
		{name: "ext get done", tasks: all, req: extReq("tasks/get", `,"params":{"taskId":"{done}",`+extMeta+`}`, "{done}"), fast: true},
		{name: "ext get working", tasks: all, req: extReq("tasks/get", `,"params":{"taskId":"{working}",`+extMeta+`}`, "{working}"), fast: true},
		{name: "ext get failed", tasks: all, req: extReq("tasks/get", `,"params":{"taskId":"{failed}",`+extMeta+`}`, "{failed}"), fast: true},
		{name: "ext get rpc error", tasks: all, req: extReq("tasks/get", `,"params":{"taskId":"{rpcerr}",`+extMeta+`}`, "{rpcerr}"), fast: true},
		{name: "ext get input_required", tasks: all, req: extReq("tasks/get", `,"params":{"taskId":"{ask}",`+extMeta+`}`, "{ask}"), fast: true},
		{name: "ext get without Mcp-Name", tasks: all, req: extReq("tasks/get", `,"params":{"taskId":"{done}",`+extMeta+`}`, ""), fast: true},
		{name: "ext get unknown", req: extReq("tasks/get", `,"params":{"taskId":"nope",`+extMeta+`}`, "nope"), fast: true},
		{name: "ext get Mcp-Name mismatch", tasks: all, req: extReq("tasks/get", `,"params":{"taskId":"{done}",`+extMeta+`}`, "{failed}")},
		{name: "ext result", tasks: all, req: extReq("tasks/result", `,"params":{"taskId":"{done}",`+extMeta+`}`, "{done}"), fast: true},
		{name: "ext list", req: extReq("tasks/list", `,"params":{`+extMeta+`}`, ""), fast: true},
		{name: "ext cancel done", tasks: all, req: extReq("tasks/cancel", `,"params":{"taskId":"{done}",`+extMeta+`}`, "{done}"), fast: true},
		{name: "ext cancel working", tasks: map[string]string{"extvictim": "working"}, req: extReq("tasks/cancel", `,"params":{"taskId":"{extvictim}",`+extMeta+`}`, "{extvictim}"), fast: true},
		{name: "ext update, unknown key", tasks: all, req: extReq("tasks/update", `,"params":{"taskId":"{ask}","inputResponses":{"nope":{}},`+extMeta+`}`, "{ask}"), fast: true},
		{name: "ext update without params", req: extReq("tasks/update", ``, "")},
		{name: "ext get, extension not declared", tasks: all, req: extReq("tasks/get", `,"params":{"taskId":"{done}","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}`, "{done}"), fast: true},
		{name: "ext get, no capabilities", tasks: all, req: extReq("tasks/get", `,"params":{"taskId":"{done}","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}`, "{done}")},
		{name: "ext get, capabilities not an object", tasks: all, req: extReq("tasks/get", `,"params":{"taskId":"{done}","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":7}}`, "{done}")},
		{name: "ext get, bad clientInfo", tasks: all, req: extReq("tasks/get", `,"params":{"taskId":"{done}","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientInfo":"me"}}`, "{done}")},
		{name: "ext get, Extensions in the wrong case", tasks: all, req: extReq("tasks/get", `,"params":{"taskId":"{done}","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"Extensions":{"io.modelcontextprotocol/tasks":{}}}}}`, "{done}"), fast: true},
		{name: "ext get, no Mcp-Method", tasks: all, req: func(s *diffSide) (map[string]string, string) {
			h := extHeaders("tasks/get", s.tasks["done"])
			h["Mcp-Method"] = ""
			return h, fill(s, `{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"taskId":"{done}",`+extMeta+`}}`)
		}},
		{name: "ext get, wrong Mcp-Method", tasks: all, req: func(s *diffSide) (map[string]string, string) {
			h := extHeaders("tasks/cancel", s.tasks["done"])
			return h, fill(s, `{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"taskId":"{done}",`+extMeta+`}}`)
		}},
		{name: "ext get, no version header", tasks: all, req: func(s *diffSide) (map[string]string, string) {
			h := extHeaders("tasks/get", s.tasks["done"])
			h["Mcp-Protocol-Version"] = ""
			return h, fill(s, `{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"taskId":"{done}",`+extMeta+`}}`)
		}},
		{name: "ext get, version header mismatch", tasks: all, req: func(s *diffSide) (map[string]string, string) {
			h := extHeaders("tasks/get", s.tasks["done"])
			h["Mcp-Protocol-Version"] = "2026-09-01"
			return h, fill(s, `{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"taskId":"{done}",`+extMeta+`}}`)
		}},
		{name: "ext get, unsupported version", tasks: all, req: func(s *diffSide) (map[string]string, string) {
			h := extHeaders("tasks/get", s.tasks["done"])
			h["Mcp-Protocol-Version"] = "2099-01-01"
			return h, fill(s, `{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"taskId":"{done}","_meta":{"io.modelcontextprotocol/protocolVersion":"2099-01-01","io.modelcontextprotocol/clientCapabilities":{}}}}`)
		}},
		{name: "ext get, version only in the header", tasks: all, req: extReq("tasks/get", `,"params":{"taskId":"{done}"}`, "{done}")},
		{name: "ext create", req: extReq("tools/call", `,"params":{"name":"sleepy","arguments":{"ms":0},`+extMeta+`}`, "sleepy"), fast: true},
		{name: "ext create, required tool", req: extReq("tools/call", `,"params":{"name":"must","arguments":{"ms":0},`+extMeta+`}`, "must"), fast: true},
		{name: "ext create, Mcp-Name mismatch", req: extReq("tools/call", `,"params":{"name":"sleepy","arguments":{"ms":0},`+extMeta+`}`, "echo")},
		{name: "ext create, bad arguments", req: extReq("tools/call", `,"params":{"name":"sleepy","arguments":{"ms":"x"},`+extMeta+`}`, "sleepy"), fast: true},
		{name: "ext create, extension not declared", req: extReq("tools/call", `,"params":{"name":"sleepy","arguments":{"ms":0},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}`, "sleepy")},
		{name: "ext plain call", req: extReq("tools/call", `,"params":{"name":"echo","arguments":{"text":"x"},`+extMeta+`}`, "echo"), fast: true},
		{name: "ext plain call, bad arguments", req: extReq("tools/call", `,"params":{"name":"echo","arguments":{"text":false},`+extMeta+`}`, "echo"), fast: true},
		{name: "ext plain call, host mode", req: extReq("tools/call", `,"params":{"name":"sleepy","arguments":{"ms":0},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}`, "sleepy"), fast: true},
		{name: "ext plain call, JSON-RPC error", req: extReq("tools/call", `,"params":{"name":"rpcerr","arguments":{},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}`, "rpcerr"), fast: true},
		{name: "ext plain call, progress", req: extReq("tools/call", `,"params":{"name":"chatty","arguments":{"n":2},"_meta":{"progressToken":"t","io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"extensions":{"io.modelcontextprotocol/tasks":{}}},"io.modelcontextprotocol/clientInfo":{"name":"diff","version":"1"}}}`, "chatty"), fast: true},
		{name: "ext plain call, host mode, notifications", req: extReq("tools/call", `,"params":{"name":"chatty_host","arguments":{"n":1},"_meta":{"progressToken":"t","io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}`, "chatty_host"), fast: true},
		{name: "ext plain call, a log level", req: extReq("tools/call", `,"params":{"name":"chatty","arguments":{"n":2},"_meta":{"io.modelcontextprotocol/logLevel":"info","io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}`, "chatty")},
		{name: "ext plain call, unknown tool", req: extReq("tools/call", `,"params":{"name":"nope","arguments":{},`+extMeta+`}`, "nope")},
		{name: "ext plain call, required tool undeclared", req: extReq("tools/call", `,"params":{"name":"must","arguments":{"ms":0},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}`, "must"), fast: true},
	}
}
