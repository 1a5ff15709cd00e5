#!/usr/bin/env python3
"""A scripted model server on 127.0.0.1 for the real-agent tests (issue 19).

It speaks just enough of each vendor's API for one edit turn: the first request that
offers tools gets a reply asking the agent to write one file, and, when the prompt names
`RUN=<absolute path>`, then to run a shell command that creates it (with `TOOL=<name>` as
well, that command runs the program NAME found on the agent's PATH, its output, errors and
exit status into that file); a request that carries
the last tool result gets a short final answer. Everything else (title generation, token counts,
warm-ups) gets a plain text reply. The file and its content come from the prompt:
`FILE=<absolute path>` and `TEXT=<one word>`.

Usage: model_server.py LOG  -- prints the port on the first line of stdout, then serves
until killed. Every request path and body is appended to LOG as one JSON line.
"""
import json
import re
import sys
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LOG = sys.argv[1] if len(sys.argv) > 1 else "/dev/null"


def ran_file(body_text):
    """`RUN=<absolute path>`: after the write, a shell command creates that file."""
    r = re.search(r"RUN=(/[A-Za-z0-9_./-]+)", body_text)
    return r.group(1) if r else None


def shell_command(body_text, ran):
    """The shell command that creates `ran`: `echo ran`, or with `TOOL=<name>` that program
    (looked up on the agent's PATH), its output, errors and `rc=<exit status>` in the file."""
    tool = re.search(r"TOOL=([A-Za-z0-9_.-]+)", body_text)
    if not tool:
        return f"echo ran > {ran}"
    return f"{tool.group(1)} > {ran} 2>&1; echo rc=$? >> {ran}"


def target(body_text):
    f = re.search(r"FILE=(\S+)", body_text)
    t = re.search(r"TEXT=(\w+)", body_text)
    return (f.group(1) if f else "/tmp/agent-wrote.txt", t.group(1) if t else "written")


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def body(self):
        n = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(n) if n else b""
        with open(LOG, "a") as log:
            log.write(json.dumps({"method": self.command, "path": self.path,
                                  "body": raw.decode("utf-8", "replace")}) + "\n")
        try:
            return raw.decode("utf-8", "replace"), json.loads(raw or b"{}")
        except ValueError:
            return raw.decode("utf-8", "replace"), {}

    def send(self, code, ctype, data):
        self.send_response(code)
        self.send_header("content-type", ctype)
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def sse(self, events):
        data = b"".join(
            (f"event: {name}\n" if name else "").encode() + b"data: " + json.dumps(ev).encode() + b"\n\n"
            for name, ev in events)
        self.send(200, "text/event-stream", data)

    def do_HEAD(self):
        self.send(200, "text/plain", b"")

    def do_GET(self):
        self.body()
        self.send(200, "application/json", b"{}")

    def do_POST(self):
        text, req = self.body()
        path = self.path.split("?")[0]
        if path.endswith("/v1/messages/count_tokens"):
            self.send(200, "application/json", b'{"input_tokens": 10}')
        elif path.endswith("/v1/messages"):
            self.anthropic(text, req)
        elif path.endswith("/responses"):
            self.openai_responses(text, req)
        elif path.endswith("/chat/completions"):
            self.chat_completions(text, req)
        elif path.endswith(":countTokens"):
            self.send(200, "application/json", b'{"totalTokens": 10}')
        elif ":generateContent" in path or ":streamGenerateContent" in path:
            self.gemini(path, text, req)
        else:
            self.send(404, "application/json", b'{"error": "not scripted"}')

    # Anthropic Messages API (Claude Code).
    def anthropic(self, text, req):
        tools = [t.get("name") for t in req.get("tools") or []]
        results = text.count('"tool_result"')
        ran = ran_file(text)
        done = results >= (2 if ran and "Bash" in tools else 1)
        model = req.get("model", "claude")
        msg_id = "msg_" + uuid.uuid4().hex[:12]
        start = ("message_start", {"type": "message_start", "message": {
            "id": msg_id, "type": "message", "role": "assistant", "model": model,
            "content": [], "stop_reason": None, "stop_sequence": None,
            "usage": {"input_tokens": 10, "output_tokens": 1}}})
        if tools and not done and (results == 1 or "Write" in tools):
            path, word = target(text)
            if results == 0:
                name, args = "Write", json.dumps({"file_path": path, "content": word + "\n"})
            else:
                name, args = "Bash", json.dumps({"command": shell_command(text, ran),
                                                 "description": "Run a shell command"})
            block = {"type": "tool_use", "id": "toolu_" + uuid.uuid4().hex[:12],
                     "name": name, "input": {}}
            delta = {"type": "input_json_delta", "partial_json": args}
            stop = "tool_use"
        else:
            block = {"type": "text", "text": ""}
            delta = {"type": "text_delta", "text": "Done." if done else "Agent test"}
            stop = "end_turn"
        if not req.get("stream"):
            content = dict(block)
            if block["type"] == "tool_use":
                content["input"] = json.loads(delta["partial_json"])
            else:
                content["text"] = delta["text"]
            self.send(200, "application/json", json.dumps({
                "id": msg_id, "type": "message", "role": "assistant", "model": model,
                "content": [content], "stop_reason": stop, "stop_sequence": None,
                "usage": {"input_tokens": 10, "output_tokens": 5}}).encode())
            return
        self.sse([
            start,
            ("content_block_start", {"type": "content_block_start", "index": 0,
                                     "content_block": block}),
            ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta}),
            ("content_block_stop", {"type": "content_block_stop", "index": 0}),
            ("message_delta", {"type": "message_delta",
                               "delta": {"stop_reason": stop, "stop_sequence": None},
                               "usage": {"output_tokens": 5}}),
            ("message_stop", {"type": "message_stop"}),
        ])

    # Gemini API (Gemini CLI): streamGenerateContent?alt=sse or generateContent.
    def gemini(self, path, text, req):
        reply = gemini_reply(text, req)
        if ":streamGenerateContent" in path:
            self.sse([(None, reply)])
        else:
            self.send(200, "application/json", json.dumps(reply).encode())

    # OpenAI chat completions (aider): a plain-text edit, the file named relative to the
    # repository it runs in. With `RUN=`, a new-file SEARCH/REPLACE block (aider's `diff`
    # format, the one that carries shell commands) and the command in a ```bash block,
    # which aider offers to run; else the file whole (its `whole` format).
    def chat_completions(self, text, req):
        path, word = target(text)
        name = path.rsplit("/", 1)[-1]
        ran = ran_file(text)
        if ran:
            content = (f"{name}\n```\n<<<<<<< SEARCH\n=======\n{word}\n>>>>>>> REPLACE\n```\n\n"
                       f"```bash\n{shell_command(text, ran)}\n```\n")
        else:
            content = f"{name}\n```\n{word}\n```\n"
        cid = "chatcmpl-" + uuid.uuid4().hex[:12]
        base = {"id": cid, "created": 0, "model": req.get("model", "mock")}
        usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
        if not req.get("stream"):
            self.send(200, "application/json", json.dumps(dict(
                base, object="chat.completion", usage=usage, choices=[{
                    "index": 0, "finish_reason": "stop",
                    "message": {"role": "assistant", "content": content}}])).encode())
            return
        chunk = dict(base, object="chat.completion.chunk")
        data = b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in [
            dict(chunk, choices=[{"index": 0, "delta": {"role": "assistant", "content": content},
                                  "finish_reason": None}]),
            dict(chunk, choices=[{"index": 0, "delta": {}, "finish_reason": "stop"}], usage=usage),
        ]) + b"data: [DONE]\n\n"
        self.send(200, "text/event-stream", data)

    # OpenAI Responses API (Codex CLI).
    def openai_responses(self, text, req):
        tools = {t.get("name") or t.get("type"): t for t in req.get("tools") or []}
        done = '"function_call_output"' in text or '"custom_tool_call_output"' in text
        rid = "resp_" + uuid.uuid4().hex[:12]
        if not done and tools:
            path, word = target(text)
            script = f"printf '%s\\n' {word} > {path}"
            if ran_file(text):
                script += f" && {{ {shell_command(text, ran_file(text))}; }}"
            if "shell_command" in tools:
                name, args = "shell_command", {"command": script}
            elif "exec_command" in tools:
                name, args = "exec_command", {"cmd": script}
            else:
                name, args = "shell", {"command": ["bash", "-c", script]}
            item = {"type": "function_call", "id": "fc_" + uuid.uuid4().hex[:12],
                    "call_id": "call_" + uuid.uuid4().hex[:12], "name": name,
                    "arguments": json.dumps(args), "status": "completed"}
        else:
            item = {"type": "message", "id": "msg_" + uuid.uuid4().hex[:12], "role": "assistant",
                    "status": "completed",
                    "content": [{"type": "output_text", "text": "Done.", "annotations": []}]}
        usage = {"input_tokens": 10, "input_tokens_details": {"cached_tokens": 0},
                 "output_tokens": 5, "output_tokens_details": {"reasoning_tokens": 0},
                 "total_tokens": 15}
        resp = {"id": rid, "object": "response", "status": "in_progress", "output": []}
        self.sse([
            ("response.created", {"type": "response.created", "response": resp}),
            ("response.output_item.added", {"type": "response.output_item.added",
                                            "output_index": 0, "item": item}),
            ("response.output_item.done", {"type": "response.output_item.done",
                                           "output_index": 0, "item": item}),
            ("response.completed", {"type": "response.completed", "response": dict(
                resp, status="completed", output=[item], usage=usage)}),
        ])


def from_schema(schema):
    """A small value a JSON schema accepts (Gemini CLI's routers ask for JSON)."""
    kind = str(schema.get("type", "object")).lower()
    if kind == "object":
        props = schema.get("properties") or {}
        return {k: from_schema(props.get(k, {})) for k in schema.get("required") or props}
    if kind == "array":
        return []
    if kind in ("integer", "number"):
        return 10
    if kind == "boolean":
        return False
    enum = schema.get("enum")
    return enum[0] if enum else "scripted"


def gemini_reply(text, req):
    """One Gemini candidate: a write_file call first, then (with `RUN=`) a
    run_shell_command call, then a final answer."""
    config = req.get("generationConfig") or {}
    schema = config.get("responseJsonSchema") or config.get("responseSchema")
    if config.get("responseMimeType") == "application/json":
        part = {"text": json.dumps(from_schema(schema or {}))}
        return {"candidates": [{"content": {"role": "model", "parts": [part]},
                                "finishReason": "STOP", "index": 0}]}
    names = [f.get("name") for t in req.get("tools") or []
             for f in t.get("functionDeclarations") or []]
    results = text.count('"functionResponse"')
    ran = ran_file(text)
    shell = ran and "run_shell_command" in names
    if "write_file" in names and results == 0:
        path, word = target(text)
        part = {"functionCall": {"name": "write_file",
                                 "args": {"file_path": path, "content": word + "\n"}}}
    elif shell and results == 1:
        part = {"functionCall": {"name": "run_shell_command",
                                 "args": {"command": shell_command(text, ran),
                                          "description": "Run a shell command"}}}
    elif results:
        part = {"text": "Done."}
    else:
        part = {"text": "Agent test"}
    return {"candidates": [{"content": {"role": "model", "parts": [part]},
                            "finishReason": "STOP", "index": 0}],
            "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 5,
                              "totalTokenCount": 15}}


def main():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print(server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
