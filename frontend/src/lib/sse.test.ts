import { describe, expect, it } from "vitest";
import { SseParser } from "./sse";

describe("SseParser", () => {
  it("parses named events split across chunks", () => {
    const parser = new SseParser();
    expect(parser.feed('event: metrics\ndata: {"itera')).toEqual([]);
    expect(parser.feed('tion": 1}\n\nevent: status\ndata: {}\n\n')).toEqual([
      { event: "metrics", data: '{"iteration": 1}', id: undefined },
      { event: "status", data: "{}", id: undefined },
    ]);
  });

  it("ignores heartbeats, joins multi-line data, defaults the event name and accepts CRLF", () => {
    const parser = new SseParser();
    expect(parser.feed(": heartbeat\n\ndata: a\r\ndata: b\r\n\r\n")).toEqual([{ event: "message", data: "a\nb", id: undefined }]);
  });

  it("does not emit an event without data", () => {
    expect(new SseParser().feed("event: status\n\n")).toEqual([]);
  });
});
