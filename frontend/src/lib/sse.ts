/**
 * Server-sent events over fetch, so the stream request carries the same `Authorization` header as every other call
 * (EventSource cannot send headers, and a token in the URL would end up in access logs).
 * `SseParser` is the wire format (pure); `openEventStream` connects, parses and reconnects after `retryMs`.
 */

export interface SseMessage {
  event: string; // "message" when the server sent no `event:` line
  data: string; // `data:` lines joined with "\n"
  id?: string;
}

/** Incremental parser of the text/event-stream format: feed chunks as they arrive, get complete messages. */
export class SseParser {
  private buffer = "";
  private event = "";
  private data: string[] = [];
  private id: string | undefined;

  feed(chunk: string): SseMessage[] {
    this.buffer += chunk;
    const out: SseMessage[] = [];
    let newline: number;
    while ((newline = this.buffer.search(/\r\n|\r|\n/)) >= 0) {
      const line = this.buffer.slice(0, newline);
      const width = this.buffer.startsWith("\r\n", newline) ? 2 : 1;
      this.buffer = this.buffer.slice(newline + width);
      if (line === "") {
        if (this.data.length > 0) out.push({ event: this.event || "message", data: this.data.join("\n"), id: this.id });
        this.event = "";
        this.data = [];
        continue;
      }
      if (line.startsWith(":")) continue; // comment / heartbeat
      const colon = line.indexOf(":");
      const field = colon < 0 ? line : line.slice(0, colon);
      const value = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
      if (field === "event") this.event = value;
      else if (field === "data") this.data.push(value);
      else if (field === "id") this.id = value;
    }
    return out;
  }
}

export interface StreamHandlers {
  onOpen?: () => void;
  onMessage: (message: SseMessage) => void;
  onDisconnect?: () => void;
  /** A refused stream (HTTP status >= 400): no reconnect. */
  onRefused?: (status: number, body: unknown) => void;
}

export interface EventStream {
  close: () => void;
}

export function openEventStream(url: string, headers: () => Record<string, string>, handlers: StreamHandlers, retryMs = 3000): EventStream {
  let closed = false;
  let controller: AbortController | null = null;
  let timer: ReturnType<typeof setTimeout> | undefined;

  const connect = async () => {
    controller = new AbortController();
    try {
      const response = await fetch(url, { headers: { Accept: "text/event-stream", ...headers() }, signal: controller.signal });
      if (!response.ok || !response.body) {
        const body = await response.json().catch(() => null);
        if (response.status >= 400 && response.status < 500) {
          closed = true;
          handlers.onRefused?.(response.status, body);
          return;
        }
        throw new Error(`stream answered HTTP ${response.status}`);
      }
      handlers.onOpen?.();
      const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
      const parser = new SseParser();
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        for (const message of parser.feed(value)) handlers.onMessage(message);
      }
    } catch (err) {
      if (closed) return; // aborted by close()
    }
    handlers.onDisconnect?.();
    if (!closed) timer = setTimeout(() => void connect(), retryMs);
  };

  void connect();
  return {
    close: () => {
      closed = true;
      clearTimeout(timer);
      controller?.abort();
    },
  };
}
