/** The spec's choices with their labels: modes, algorithms, engines, dispatch policies, reward types, environments.
 * Names, order and labels come from the OpenAPI schema (`x-choices`, published by contract/spec.py from the registries beside each
 * implementation) through the generated `choices.gen.ts`; `satisfies` fails to type-check when a generated value is
 * not in the schema's enum. Nothing here spells a name. */
import type { Schemas } from "../api/types";
import { CHOICES } from "../api/choices.gen";

type Choice<T extends string> = readonly { readonly value: T; readonly label: string }[];
type Mode = NonNullable<Schemas["JobSpec"]["mode"]>;
type Algorithm = NonNullable<Schemas["AlgorithmSpec"]["name"]>;
type Engine = NonNullable<Schemas["GenerationSpec"]["engine"]>;
type Policy = NonNullable<Schemas["DispatchSpec"]["policy"]>;

const pairs = <T extends string>(list: Choice<T>): [T, string][] => list.map(({ value, label }) => [value, label]);

export const MODES = pairs(CHOICES.mode satisfies Choice<Mode>);
export const ALGORITHMS = pairs(CHOICES.algorithm satisfies Choice<Algorithm>);
export const ENGINES = pairs(CHOICES.engine satisfies Choice<Engine>);
export const DISPATCH_POLICIES = pairs(CHOICES.dispatchPolicy satisfies Choice<Policy>);
export const REWARD_TYPES = pairs(CHOICES.rewardType satisfies Choice<string>);
type Environment = NonNullable<Schemas["EnvironmentSpec"]["type"]>;
/** Built-in environments and "python" (your code), for `environment.type`. */
export const ENVIRONMENTS = pairs(CHOICES.environment satisfies Choice<Environment>);
