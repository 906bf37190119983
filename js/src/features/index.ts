// THE list of canvas features. Where two overlap, the one earlier in the list wins: it takes the
// click first, its fill colours and node sizes are the ones drawn, its legend is shown, its styles
// override, and label templates of later features wrap its label. A new view is one folder under
// `features/` plus one entry here.
import { checkpoint } from "./checkpoint/feature";
import { details } from "./details/feature";
import { diff } from "./diff/feature";
import type { FeatureFactory } from "../core/context";
import { findings } from "./findings/feature";
import { folding } from "./folding/feature";
import { key } from "./key/feature";
import { overlay } from "./overlay/feature";
import { search } from "./search/feature";
import { stepper } from "./stepper/feature";
import { whatIf } from "./whatif/feature";
import { why } from "./why/feature";

export const FEATURES = [folding, whatIf, checkpoint, stepper, overlay, diff, findings, search, key, details, why] as const;

type HooksOf<F> = F extends FeatureFactory<infer H> ? H : never;
type Intersection<U> = (U extends unknown ? (x: U) => void : never) extends (x: infer I) => void ? I : never;
/** Every feature's test hooks, merged (see `Feature.hooks`). */
export type FeatureHooks = Intersection<HooksOf<(typeof FEATURES)[number]>>;
