import { describe, expect, it } from "vitest";
import { chatBody, clampSampling, DEFAULT_SAMPLING, errorText, meanLogprob, playgroundRoute, readReply } from "./playground";

describe("chat body", () => {
  it("puts the system prompt first, asks for logprobs and sends a seed only when one is set", () => {
    const body = chatBody("job:3@best", "Be brief.", [{ role: "user", content: "1+1=" }], { ...DEFAULT_SAMPLING, seed: 7, top_logprobs: 2 });
    expect(body.messages).toEqual([{ role: "system", content: "Be brief." }, { role: "user", content: "1+1=" }]);
    expect(body).toMatchObject({ model: "job:3@best", logprobs: true, top_logprobs: 2, seed: 7, max_tokens: 128 });
    expect("seed" in chatBody("m", " ", [], DEFAULT_SAMPLING)).toBe(false);
    expect((chatBody("m", " ", [], DEFAULT_SAMPLING).messages as unknown[]).length).toBe(0);
  });

  it("clamps the controls to what the API accepts", () => {
    expect(clampSampling({ temperature: 5, top_p: 0, max_tokens: 0.2, seed: Number.NaN, top_logprobs: 50 }))
      .toEqual({ temperature: 2, top_p: 0.01, max_tokens: 1, seed: null, top_logprobs: 20 });
  });
});

describe("reading an answer", () => {
  it("takes the first choice, its token counts and per-token logprobs", () => {
    const reply = readReply({
      choices: [{ message: { content: "2" }, finish_reason: "stop", logprobs: { content: [{ token: "2", logprob: -0.1, top_logprobs: [{ token: "2", logprob: -0.1 }, { token: "3", logprob: -2.5 }] }] } }],
      usage: { prompt_tokens: 9, completion_tokens: 1 },
    });
    expect(reply).toMatchObject({ text: "2", finishReason: "stop", promptTokens: 9, completionTokens: 1 });
    expect(reply.tokens[0].top.map((t) => t.token)).toEqual(["2", "3"]);
    expect(meanLogprob(reply.tokens)).toBeCloseTo(-0.1);
    expect(meanLogprob([])).toBeNull();
    expect(() => readReply({ choices: [] })).toThrow();
  });

  it("names the failing parameter from OpenAI's error envelope", () => {
    expect(errorText(404, { error: { message: "The model 'x' does not exist", param: "model" } })).toBe("404: The model 'x' does not exist (model)");
    expect(errorText(503, { detail: "Redis is not available" })).toBe("503: Redis is not available");
    expect(errorText(500, null)).toBe("500: the request failed");
  });
});

it("links to the playground with models preselected", () => {
  expect(playgroundRoute("job:4@2")).toBe("/playground?model=job%3A4%402");
  expect(playgroundRoute("a", "b")).toBe("/playground?model=a&compare=b");
});
