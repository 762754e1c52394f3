/** The grader-test panel's input: a pasted grader spec (the platform's reward spec, a job spec's `reward`, or an
 * OpenAI grader object) and a sample, as the body of POST /graders/run. */
import type { Schemas } from "../api/types";
import { ParseError, parseJsonOrYaml, parseObject } from "./structured";

export type RewardSpec = Schemas["RewardSpec"];
export type GraderRunRequest = Schemas["GraderRunRequest"];
export type GraderRunResult = Schemas["GraderRunResult"];

/** The keys of a reward spec; an object with `type` and any other key is an OpenAI grader (its fields are params). */
const SPEC_KEYS = new Set(["type", "params", "weight", "components", "code"]);

type Obj = Record<string, unknown>;
const isObj = (v: unknown): v is Obj => v !== null && typeof v === "object" && !Array.isArray(v);

/** A pasted value as a reward spec: `{type, params}` as is; a job spec's `reward`; an OpenAI grader
 * (`{type: "string_check", input, reference, operation, name}`) with its fields moved under `params`. */
export function toRewardSpec(value: unknown): RewardSpec {
  if (!isObj(value)) throw new ParseError("the grader spec must be an object with a `type`");
  if (!("type" in value) && isObj(value.reward)) return toRewardSpec(value.reward); // a job spec
  if (typeof value.type !== "string" || !value.type) throw new ParseError("the grader spec needs a `type` (a string)");
  const extra = Object.keys(value).filter((key) => !SPEC_KEYS.has(key));
  if (extra.length === 0 || "params" in value) return value as RewardSpec; // the API names any unknown key
  const params: Obj = {};
  for (const key of extra) params[key] = value[key];
  const spec: Obj = { type: value.type, params };
  for (const key of ["weight", "components", "code"]) if (key in value) spec[key] = value[key];
  return spec as RewardSpec;
}

export class GraderInputError extends ParseError {
  constructor(readonly field: "grader" | "item", message: string) {
    super(message);
  }
}

/** The request body from the panel's text boxes; GraderInputError naming the box that does not parse. */
export async function graderRequest(input: { spec: string; output: string; item: string; prompt?: string }): Promise<GraderRunRequest> {
  let grader: RewardSpec;
  try {
    grader = toRewardSpec(await parseJsonOrYaml(input.spec));
  } catch (caught) {
    throw new GraderInputError("grader", caught instanceof Error ? caught.message : String(caught));
  }
  let item: Obj;
  try {
    item = await parseObject(input.item, "the item");
  } catch (caught) {
    throw new GraderInputError("item", caught instanceof Error ? caught.message : String(caught));
  }
  return { grader, sample: { output_text: input.output }, item, prompt: input.prompt ?? "" };
}

/** `#/graders` pre-filled with `spec` (the submit form's "Test this grader"). */
export function graderRoute(spec?: RewardSpec): string {
  return spec ? `/graders?spec=${encodeURIComponent(JSON.stringify(spec))}` : "/graders";
}

/** The spec a `#/graders?spec=` link carries, pretty-printed for the text box ("" when none or not JSON). */
export function specFromRoute(raw: string | null): string {
  if (!raw) return "";
  try {
    return JSON.stringify(JSON.parse(raw), null, 2);
  } catch {
    return "";
  }
}
