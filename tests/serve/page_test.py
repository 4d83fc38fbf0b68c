"""The page at / of `megatron-app serve` in headless Chromium (Debian's chromium and
chromium-driver through python3-selenium): type a prompt, set greedy, press Generate, and the
continuation streams into the page, equal to the server's own greedy completion.

  page_test.py --url URL
"""
import argparse
import time

import requests
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    a = ap.parse_args()
    prompt, tokens = "Mr. Darcy said", 20
    want = requests.post(a.url + "/v1/completions", json={
        "prompt": prompt, "max_tokens": tokens, "temperature": 0}).json()["choices"][0]["text"]

    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    try:
        driver.get(a.url + "/")
        box = driver.find_element(By.ID, "prompt")
        box.clear()
        box.send_keys(prompt)
        for field, value in (("max_tokens", tokens), ("temperature", 0)):
            element = driver.find_element(By.ID, field)
            element.clear()
            element.send_keys(str(value))
        driver.find_element(By.ID, "generate").click()
        deadline = time.time() + 60
        status = ""
        while not status.startswith(("done", "error")):
            if time.time() > deadline:
                raise SystemExit("FAIL: the page did not finish: " + status)
            time.sleep(0.1)
            status = driver.find_element(By.ID, "status").text
        got = driver.find_element(By.ID, "continuation").get_attribute("textContent")
        model = driver.find_element(By.ID, "model").text
    finally:
        driver.quit()
    if not status.startswith("done"):
        raise SystemExit("FAIL: the page says " + status)
    if got != want:
        raise SystemExit(f"FAIL: the page shows {got!r}, the server's greedy text is {want!r}")
    if "gpt_tiny" not in model:
        raise SystemExit("FAIL: the page names the model: " + model)
    print(f"ok   the page streamed the greedy continuation ({len(got)} characters, {status})")


if __name__ == "__main__":
    main()
