import { describe, expect, it } from "vitest";
import { DEFAULT_FORM, fromSpec, localErrors, mergeSpec, toSpec } from "./jobForm";

const gateway = { ...DEFAULT_FORM, model: "tiny", "environment.type": "gateway", "environment.params": "{a: 1}" };

describe("gateway agent fields", () => {
  it("sends the agent's code with its requirements one per line, and no environment params", () => {
    const spec = toSpec({ ...gateway, "agent.requirements": " openai\n\nopenai-agents==0.24.0 \n", "agent.concurrency": "2" },
      { "environment.params": { a: 1 } });
    expect(spec.agent).toEqual({ code: DEFAULT_FORM["agent.code"], requirements: ["openai", "openai-agents==0.24.0"], episodes_per_jail: 32, concurrency: 2, timeout_s: 300 });
    expect(spec.environment).toMatchObject({ type: "gateway" });
    expect(spec.environment).not.toHaveProperty("params");
    expect(DEFAULT_FORM["agent.code"]).toMatch(/^def run\(task, base_url, api_key\):/m);
  });

  it("sends a URL agent without code or requirements, and no agent for other environments", () => {
    const spec = toSpec({ ...gateway, "agent.where": "url", "agent.url": " https://agents.example.com/a ", "agent.timeout_s": "30" });
    expect(spec.agent).toEqual({ url: "https://agents.example.com/a", concurrency: 4, timeout_s: 30 });
    expect(toSpec({ ...gateway, "environment.type": "calculator" }).agent).toBeNull();
  });

  it("names non-numbers before sending", () => {
    expect(localErrors({ ...gateway, "agent.concurrency": "many" })).toHaveProperty("agent.concurrency");
  });

  it("a clone keeps the agent, and switching code to url replaces the base's agent whole", () => {
    const base = { name: "a", environment: { type: "gateway" }, agent: { code: "def run(t, b, k): pass", requirements: ["x==1", "y"], concurrency: 3, episodes_per_jail: 1 } };
    const form = fromSpec(base);
    expect(form["agent.where"]).toBe("code");
    expect(form["agent.episodes_per_jail"]).toBe("1");
    expect(toSpec(form).agent).toMatchObject({ episodes_per_jail: 1 });
    expect(form["agent.requirements"]).toBe("x==1\ny");
    expect(form["agent.concurrency"]).toBe("3");
    const byUrl = fromSpec({ ...base, agent: { url: "http://h:1" } });
    expect(byUrl["agent.where"]).toBe("url");
    expect(byUrl["agent.url"]).toBe("http://h:1");
    const merged = mergeSpec(base, toSpec({ ...form, "agent.where": "url", "agent.url": "http://h:2" }));
    expect(merged.agent).toEqual({ url: "http://h:2", concurrency: 3, timeout_s: 300 });
  });
});
