import { describe, expect, it } from "vitest";
import { GraderInputError, graderRequest, graderRoute, specFromRoute, toRewardSpec } from "./graderSpec";
import { parseJsonOrYaml, parseObject } from "./structured";

describe("parseJsonOrYaml", () => {
  it("reads JSON, then YAML, and names the line of text that is neither", async () => {
    expect(await parseJsonOrYaml('{"type": "string_check"}')).toEqual({ type: "string_check" });
    expect(await parseJsonOrYaml("type: multi\nparams:\n  calculate_output: a + b\n")).toEqual({ type: "multi", params: { calculate_output: "a + b" } });
    expect(await parseJsonOrYaml("  ")).toBeUndefined();
    await expect(parseJsonOrYaml("type: [unclosed")).rejects.toThrow(/neither JSON nor YAML.*line 1/);
  });

  it("parseObject refuses lists and scalars and reads empty text as {}", async () => {
    expect(await parseObject("", "the item")).toEqual({});
    await expect(parseObject("[1, 2]", "the item")).rejects.toThrow("the item must be an object (key: value), got a list");
    await expect(parseObject("42", "the item")).rejects.toThrow("got number");
  });
});

describe("toRewardSpec", () => {
  it("keeps a platform reward spec as it is", () => {
    const spec = { type: "string_check", params: { input: "{{ sample.output_text }}", reference: "42", operation: "eq" } };
    expect(toRewardSpec(spec)).toBe(spec);
    expect(toRewardSpec({ type: "exact_match" })).toEqual({ type: "exact_match" });
  });

  it("moves an OpenAI grader's fields under params", () => {
    const openai = { type: "string_check", name: "exact", input: "{{ sample.output_text }}", reference: "{{ item.answer }}", operation: "eq" };
    expect(toRewardSpec(openai)).toEqual({
      type: "string_check",
      params: { name: "exact", input: "{{ sample.output_text }}", reference: "{{ item.answer }}", operation: "eq" },
    });
  });

  it("takes a job spec's reward, and refuses what has no type", () => {
    expect(toRewardSpec({ name: "job", model: "tiny", reward: { type: "numeric" } })).toEqual({ type: "numeric" });
    expect(() => toRewardSpec([1])).toThrow("must be an object with a `type`");
    expect(() => toRewardSpec({ params: {} })).toThrow("needs a `type`");
  });
});

describe("graderRequest", () => {
  it("builds the POST /graders/run body from the panel's text boxes", async () => {
    const body = await graderRequest({ spec: "type: string_check\ninput: '{{ sample.output_text }}'\nreference: '42'\noperation: eq\n", output: "42", item: '{"answer": "42"}' });
    expect(body).toEqual({
      grader: { type: "string_check", params: { input: "{{ sample.output_text }}", reference: "42", operation: "eq" } },
      sample: { output_text: "42" },
      item: { answer: "42" },
      prompt: "",
    });
  });

  it("names the box that does not parse", async () => {
    const bad = graderRequest({ spec: '{"type": "string_check"}', output: "", item: "[1]" });
    await expect(bad).rejects.toBeInstanceOf(GraderInputError);
    await expect(bad).rejects.toMatchObject({ field: "item" });
    await expect(graderRequest({ spec: "- a\n- b", output: "", item: "" })).rejects.toMatchObject({ field: "grader" });
  });
});

describe("grader links", () => {
  it("carries a spec from the submit form to the panel", () => {
    const route = graderRoute({ type: "string_check", params: { reference: "a&b" } });
    expect(route.startsWith("/graders?spec=")).toBe(true);
    const raw = new URLSearchParams(route.split("?")[1]).get("spec");
    expect(JSON.parse(specFromRoute(raw))).toEqual({ type: "string_check", params: { reference: "a&b" } });
    expect(specFromRoute("{not json")).toBe("");
    expect(graderRoute()).toBe("/graders");
  });
});
